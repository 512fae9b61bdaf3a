"""The plugin framework: extension points, tier combiners, the dispatcher and the registry.

A session asks its plugins through :mod:`~gangsched.framework.dispatch`, which resolves every
extension point's chain once (:mod:`~gangsched.framework.extension_points` is the contract,
:mod:`~gangsched.framework.combine` how tiers combine answers, :mod:`~gangsched.framework.answers`
how a third-party plugin's answer is checked), and finds plugins and actions by name in
:mod:`~gangsched.framework.registry`. See ARCHITECTURE.md at the repository root.
"""
