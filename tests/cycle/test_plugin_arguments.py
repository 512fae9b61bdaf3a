"""The argument names the built-in plugins and actions declare (Volcano's spelling,
``<prefix>.<key>``), and the bin-packing resource weights binpack and network-topology-aware
read alike."""

from __future__ import annotations

import pytest

from gangsched.actions.allocate import AllocateAction
from gangsched.actions.backfill import BackfillAction
from gangsched.actions.preempt import PreemptAction
from gangsched.actions.reclaim import ReclaimAction
from gangsched.errors import ConfigError
from gangsched.framework.extension_points import argument_names
from gangsched.plugins.binpack import BinpackPlugin
from gangsched.plugins.network_topology import NetworkTopologyAwarePlugin
from gangsched.plugins.nodeorder import NodeOrderPlugin
from gangsched.plugins.predicates import PredicatesPlugin


def test_argument_names_prefixes_every_key_in_order() -> None:
    assert argument_names("binpack", "cpu", "resources.*") == ("binpack.cpu", "binpack.resources.*")
    assert argument_names("binpack") == ()


@pytest.mark.parametrize(
    ("plugin", "names"),
    [
        (
            BinpackPlugin,
            {
                "binpack.cpu",
                "binpack.memory",
                "binpack.resources",
                "binpack.resources.*",
                "binpack.weight",
            },
        ),
        (
            NetworkTopologyAwarePlugin,
            {
                "hypernode.binpack.cpu",
                "hypernode.binpack.memory",
                "hypernode.binpack.normal-pod.enable",
                "hypernode.binpack.normal-pod.fading",
                "hypernode.binpack.resources",
                "hypernode.binpack.resources.*",
                "hypernode.gradient.evict.max-hypernodes",
                "weight",
            },
        ),
        (
            NodeOrderPlugin,
            {
                "balancedresource.weight",
                "leastrequested.weight",
                "mostrequested.weight",
                "tainttoleration.weight",
                "imagelocality.weight",
                "nodeaffinity.weight",
                "podaffinity.weight",
                "podtopologyspread.weight",
                "selectorspread.weight",
                "volumebinding.weight",
            },
        ),
        (
            PredicatesPlugin,
            {
                "predicate.NodeAffinityEnable",
                "predicate.TaintTolerationEnable",
                "predicate.CacheEnable",
                "predicate.DiskPressureEnable",
                "predicate.DynamicResourceAllocationEnable",
                "predicate.GPUNumberEnable",
                "predicate.GPUSharingEnable",
                "predicate.MemoryPressureEnable",
                "predicate.NodeLockEnable",
                "predicate.NodePortsEnable",
                "predicate.NodeVolumeLimitsEnable",
                "predicate.PIDPressureEnable",
                "predicate.PodAffinityEnable",
                "predicate.PodTopologySpreadEnable",
                "predicate.ProportionalEnable",
                "predicate.VGPUEnable",
                "predicate.VolumeBindingEnable",
                "predicate.VolumeZoneEnable",
                "predicate.resources",
                "predicate.resources.*",
                "dynamicresources.filterTimeoutSeconds",
                "volumebinding.bindTimeoutSeconds",
                "volumebinding.shape",
                "volumebinding.weight",
            },
        ),
    ],
    ids=lambda p: getattr(p, "name", ""),
)
def test_a_plugin_declares_volcanos_argument_names(plugin: type, names: set[str]) -> None:
    declared = plugin.known_arguments  # type: ignore[attr-defined]
    assert len(declared) == len(set(declared))
    assert set(declared) == names


def test_binpack_and_hypernode_binpack_read_resource_weights_alike() -> None:
    listed = {"resources": "nvidia.com/gpu, example.com/foo", "resources.nvidia.com/gpu": 8}
    binpack = BinpackPlugin({f"binpack.{k}": v for k, v in {"cpu": 2, **listed}.items()})
    topo = NetworkTopologyAwarePlugin(
        {f"hypernode.binpack.{k}": v for k, v in {"cpu": 2, **listed}.items()}
    )
    expected = {"cpu": 2.0, "memory": 1.0, "nvidia.com/gpu": 8.0, "example.com/foo": 1.0}
    assert binpack.weights == expected
    assert topo.weights == expected
    assert list(binpack.weights) == list(topo.weights) == list(expected)


@pytest.mark.parametrize("score", ["leastrequested", "imagelocality"])
def test_nodeorder_checks_every_declared_weight(score: str) -> None:
    with pytest.raises(ConfigError, match=f"{score}.weight"):
        NodeOrderPlugin({f"{score}.weight": "heavy"})


@pytest.mark.parametrize(
    ("action", "names"),
    [
        (
            AllocateAction,
            {
                "placer",
                "placer.deterministic-time",
                "placer.seed",
                "placer.time-limit",
                "placer.workers",
                "predicateErrorCacheEnable",
                "retry",
            },
        ),
        (BackfillAction, {"predicateErrorCacheEnable"}),
        (
            PreemptAction,
            {
                "enableTopologyAwarePreemption",
                "maxCandidateNodesAbsolute",
                "minCandidateNodesAbsolute",
                "minCandidateNodesPercentage",
                "predicateErrorCacheEnable",
                "topologyAwarePreemptWorkerNum",
                "allowWholeBundle",
                "allVictimRules",
                "victimSelection",
            },
        ),
        (
            ReclaimAction,
            {"predicateErrorCacheEnable", "allowWholeBundle", "fairShareGuard", "allVictimRules"},
        ),
    ],
    ids=lambda a: getattr(a, "name", ""),
)
def test_an_action_declares_volcanos_argument_names(action: type, names: set[str]) -> None:
    declared = action.known_arguments  # type: ignore[attr-defined]
    assert len(declared) == len(set(declared))
    assert set(declared) == names
    made = action({"predicateErrorCacheEnable": False})
    assert made.arguments == {"predicateErrorCacheEnable": False}


def test_a_scorer_subclass_keeps_the_arguments_it_declares() -> None:
    from gangsched.plugins.fgd_scores import BestFitPlugin
    from gangsched.scheduler import default_registry

    class Declared(BestFitPlugin):
        name = "my-bestfit"
        known_arguments = ("my-bestfit.weight", "weight", "my-bestfit.extra")

    class Undeclared(BestFitPlugin):
        name = "other-bestfit"

    assert Declared.known_arguments == ("my-bestfit.weight", "weight", "my-bestfit.extra")
    assert set(Undeclared.known_arguments) == {"other-bestfit.weight", "weight"}
    reg = default_registry()
    reg.register_plugin("my-bestfit", Declared)
    assert reg.make_plugin("my-bestfit", {"my-bestfit.extra": "1"}).weight == 1.0
