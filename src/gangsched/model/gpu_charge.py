"""What a GPU request takes: from a device, and from its queue — the rules scheduling,
validation and checks share.

A node has ``gpus.count`` identical devices of ``gpus.milli`` milli-GPU each and a ``sharing``
flag; a task asks for ``gpu_request.count`` devices with ``gpu_request.milli`` milli-GPU on each
(1000 = one whole GPU). :func:`device_take` says how much of one such device the task holds.
The session charges it when it places a task, the snapshot checks running and reserved tasks
against it, and :mod:`gangsched.testing.invariants` checks decisions with it, so a placement the
scheduler makes is always a placement the next snapshot accepts.

The rule (a device is never split finer than its own capacity):

* a **whole-GPU** request (``milli >= 1000``) takes the **whole device, whatever its size**: a
  500-milli device (a half-size slice) given to a whole-GPU task is fully taken, not
  over-committed, and a 2000-milli device is one device, taken whole too;
* on a device **without sharing** every request takes the whole device;
* a fractional request **at or above the device's capacity** takes the whole device;
* otherwise (a fractional request smaller than a shared device) it takes exactly its milli.

A take equal to the capacity is *exclusive*: the device must be completely free, and nothing
else can share it. Devices of capacity 0 (nodes without GPUs) give 0.

What a request **charges its queue** (and its job) is a different amount, and
:func:`queue_gpu_charge` is its one owner: the request as written, as Volcano counts
``nvidia.com/gpu`` — a whole-GPU request is 1000 milli-GPU per device *whatever the device
size* (a 500-milli slice or a 2000-milli device alike), a fractional request its milli per
device; the node and the devices it lands on play no part. Queue capabilities, guarantees and
deserved shares (proportion, capacity), DRF shares, ``QueueStatus.allocated`` and the
invariant checker all count this amount, so a queue capped at 2 GPUs holds at most two
whole-GPU tasks on any devices. (A node's own accounting keeps :func:`device_take`: a
whole-GPU task on a 500-milli device uses 500 of that node's milli-GPU and charges its queue
1000.)
"""

from __future__ import annotations

from typing import overload

import numpy as np

from gangsched._types import BOOL, I64

__all__ = ["WHOLE_GPU_MILLI", "device_take", "exclusive", "queue_gpu_charge"]

#: Milli-GPU of one whole GPU as a request states it.
WHOLE_GPU_MILLI = 1000


@overload
def exclusive(milli: int, capacity: int, sharing: bool) -> bool: ...
@overload
def exclusive(milli: int | I64, capacity: I64, sharing: bool | BOOL) -> BOOL: ...
@overload
def exclusive(milli: I64, capacity: int | I64, sharing: bool | BOOL) -> BOOL: ...
def exclusive(milli: int | I64, capacity: int | I64, sharing: bool | BOOL) -> bool | BOOL:
    """Whether a request of ``milli`` per device takes devices of ``capacity`` whole.

    Scalars give a ``bool``; any array argument gives an array (NumPy broadcasting).
    """
    if type(milli) is int and type(capacity) is int and type(sharing) is bool:
        unshared: bool | BOOL = not sharing  # the scalar fast path: plain Python
    else:
        unshared = np.logical_not(sharing)
        milli, capacity = np.asarray(milli), np.asarray(capacity)
    out = unshared | (milli >= WHOLE_GPU_MILLI) | (milli >= capacity)
    if type(out) is bool:
        return out
    if np.ndim(out) == 0:
        return bool(out)
    return np.asarray(out, dtype=np.bool_)


@overload
def device_take(milli: int, capacity: int, sharing: bool) -> int: ...
@overload
def device_take(milli: int | I64, capacity: I64, sharing: bool | BOOL) -> I64: ...
@overload
def device_take(milli: I64, capacity: int | I64, sharing: bool | BOOL) -> I64: ...
def device_take(milli: int | I64, capacity: int | I64, sharing: bool | BOOL) -> int | I64:
    """Milli-GPU a request of ``milli`` per device holds on one device of ``capacity`` milli
    with GPU sharing ``sharing`` (the rule is in the module docstring).

    Scalars give an ``int``; any array argument gives an int64 array (NumPy broadcasting).
    """
    whole = exclusive(milli, capacity, sharing)  # type: ignore[arg-type]
    if type(whole) is bool:
        return int(capacity) if whole else int(milli)
    out: I64 = np.where(whole, capacity, milli).astype(np.int64)
    return out


@overload
def queue_gpu_charge(count: int, milli: int) -> int: ...
@overload
def queue_gpu_charge(count: int | I64, milli: I64) -> I64: ...
@overload
def queue_gpu_charge(count: I64, milli: int | I64) -> I64: ...
def queue_gpu_charge(count: int | I64, milli: int | I64) -> int | I64:
    """Milli-GPU a request of ``count`` devices with ``milli`` milli-GPU on each charges to its
    queue and its job: ``count × min(milli, 1000)`` (the rule is in the module docstring).

    Scalars give an ``int``; any array argument gives an int64 array (NumPy broadcasting).
    """
    if type(count) is int and type(milli) is int:
        return count * min(milli, WHOLE_GPU_MILLI)
    out: I64 = (np.asarray(count) * np.minimum(milli, WHOLE_GPU_MILLI)).astype(np.int64)
    return out
