"""One scheduling cycle's working state and the rules every action goes through.

:mod:`~gangsched.session.core` holds the :class:`~gangsched.session.core.Session`; the columns it
works on are :mod:`~gangsched.session.arrays` (nodes) and :mod:`~gangsched.session.task_states`
(tasks and jobs); :mod:`~gangsched.session.fit` is the fit rule, :mod:`~gangsched.session.gate`
the check every placement passes, :mod:`~gangsched.session.statement` the only way actions
change the session (with :mod:`~gangsched.session.ledger` keeping the books), and
:mod:`~gangsched.session.close` turns a finished session into decisions. The rules shared by
plugins and actions live in :mod:`gangsched.session.rules`. See ARCHITECTURE.md at the
repository root.
"""
