"""GPU fragmentation (the FGD measure) and six node-scoring policies, as whole-cluster kernels.

Theory of operation
-------------------
A cluster is described by plain arrays, one row per node:

* ``free_cpu`` ``(n_nodes,)`` int64 millicores, ``free_mem`` ``(n_nodes,)`` int64 (any unit, the
  pod's memory request uses the same);
* ``gpu_free`` ``(n_nodes, max_gpus)`` int64 free milli-GPU of each device. A node with fewer GPUs
  than ``max_gpus`` is padded with **0** at the end; ``gpu_count`` ``(n_nodes,)`` says how many
  columns are real devices. A padded 0 never fits a GPU request and adds nothing to any sum;
* ``model_idx`` ``(n_nodes,)`` int64 index of the node's GPU model in the caller's model list.

A pod is a :class:`PodRequest`: CPU, memory, ``num_gpu`` devices of ``gpu_milli`` each (below 1000
only for one shared device), and the models it accepts.

**Fragmentation** (Weng et al., ATC'23). The target workload is a set of *typical pods* ``m`` with
frequencies ``p_m`` (:func:`typical_pods`: the most popular resource shapes covering 95 % of the
workload, renormalized). For node ``n`` with free CPU ``c`` and device frees ``g[]``:

* ``m`` asks for no GPU, or may not use the node's model, or needs more CPU than ``c``, or
  fewer than ``num_gpu_m`` devices have ``g[i] >= gpu_milli_m``: every idle milli-GPU of the
  node is fragment, ``F_n(m) = sum(g)``;
* otherwise (``m`` fits): only the devices too small for ``m`` are fragment,
  ``F_n(m) = sum(g[i] for g[i] < gpu_milli_m)``.

``F_n = sum_m p_m F_n(m)``; the cluster fragment is ``sum_n F_n`` and the fragmentation ratio is the
cluster fragment over all idle milli-GPU, in %.

**Policies.** Each ``score_*`` kernel returns a :class:`NodeScores`: one float per node (``-inf``
where the pod does not fit) and, for a shared-GPU pod, the device it would use on that node. The
scheduler picks the highest score; ties go to the node of the smallest rank the caller gives, or to
the lowest index (the reference simulator breaks ties by the smallest node name, after renaming the
nodes with a seeded random prefix: see ``gangsched.sim.fgd.node_ranks``). The scores reproduce the
reference simulator's integer scores (0..100, truncated toward zero), because truncation creates
ties and the tie rule then decides the placement:

===============  ==========================================================================
``random``       one feasible node drawn uniformly (one ``intn`` draw); random shared device
``dotprod``      ``100 * (1 - (c/128000 * cr/128000 + G/8000 * gr/8000) / 2)``, c, G node free
                 CPU and total free GPU, cr, gr the pod's; the smallest product wins
``gpu-clustering`` band by the pod's GPU shape ("share", "1-gpu", "2-gpu", ...) among the shapes
                 already on the node: 75..100 only that shape, 50..75 mixed with it, 25..50 an
                 idle node, 0..25 other shapes only; inside a band the fuller node wins
``gpu-packing``  a partly used device: 50..100 (fuller device higher); whole free devices on a
                 used node: 33..50; a fully idle node: ``max(33 - n_gpus, n_gpus)``
``bestfit``      ``100 * (1 - (0.5 (c - cr)/128000 + 0.5 (G - gr)/8000))``
``fgd``          ``100 * sigmoid((F_n - F_n') / 1000)``, F_n' the fragment after placing the pod;
                 a shared pod tries every device with room and keeps the best
``fgd-pack``     ``fgd``, ties (equal integer scores) to the node with the least idle GPU left
                 (not one of the paper's policies)
===============  ==========================================================================

The device inside the node: a whole-GPU pod takes the first ``num_gpu`` fully free devices in index
order; a shared pod takes the device its policy names (``fgd``: best fragment score, ``random``:
uniform among devices with room, every other policy: the tightest device with room, lowest index
first). Nothing here reads a clock, a file or an unseeded random source: ``random`` draws from the
:class:`IntSource` it is handed.
"""

from __future__ import annotations

from gangsched.fragmentation import measure, policies
from gangsched.fragmentation.measure import *  # noqa: F403  (each kernel module lists its public names)
from gangsched.fragmentation.policies import *  # noqa: F403

__all__: list[str] = []
__all__ += measure.__all__
__all__ += policies.__all__
