"""The fit rule, written once, and the source of every function that reads it.

:class:`FitRule` states what a node (or a GPU device) has free now and once releases finish,
when a request fits a room, the least a device must have free for a GPU take, and what a GPU
request charges a node's GPU column. :func:`fit_source` renders the rule into the source of
:mod:`gangsched.session.fit`'s functions: the forms over every row (NumPy columns, the shared
:class:`~gangsched.session.fit.FullView`), over a few rows, and over one row in plain Python
ints, plus the refusal reasons (which column is short once releases finish). Each form takes
each of its expressions from the rule's text, so the forms agree by construction; only how
operands are read (a column, a row, an int) and how answers combine (``&`` over arrays,
``and`` over bools) differ between them.

The generator's one rewrite: "does not fit" is the rule's comparison negated
(:data:`NEGATED`), which is exact for integers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NEGATED", "RULE", "TIGHTEST", "FitRule", "fit_source", "study_fit_source"]

#: The comparison that holds exactly when the rule's does not (integers: no NaN).
NEGATED = {"<=": ">", "<": ">=", ">=": "<", ">": "<=", "==": "!=", "!=": "=="}


@dataclass(frozen=True, slots=True)
class FitRule:
    """The fit rule as text: each field an expression over named operands, or an operator."""

    #: a node's (or a device's) room now
    free: str = "{alloc} - {used}"
    #: its room once releasing tasks are gone, never into what is reserved (pipelined)
    later: str = "{free} + {releasing} - {pipelined}"
    #: ``request <fits> room``
    fits: str = "<="
    #: a device has room for a GPU take when it has at least this many milli-GPU free
    least_take: int = 1
    #: what ``count`` devices of ``take`` milli-GPU each charge the node's GPU column
    charge: str = "{count} * {take}"

    def free_of(self, alloc: str, used: str) -> str:
        return "(" + self.free.format(alloc=alloc, used=used) + ")"

    def later_of(self, free: str, releasing: str, pipelined: str) -> str:
        return "(" + self.later.format(free=free, releasing=releasing, pipelined=pipelined) + ")"

    def fit(self, request: str, room: str) -> str:
        return f"{request} {self.fits} {room}"

    def short(self, request: str, room: str) -> str:
        return f"{request} {NEGATED[self.fits]} {room}"

    def need(self, take: str, *, vector: bool) -> str:
        return (
            f"np.maximum({take}, {self.least_take})"
            if vector
            else f"max({take}, {self.least_take})"
        )

    def charge_of(self, count: str, take: str) -> str:
        return "(" + self.charge.format(count=count, take=take) + ")"

    def later_is_free_when_idle(self) -> bool:
        """Whether the rule's room later is its room now on a device with nothing releasing
        and nothing reserved (so a form may skip the later arithmetic there). Checked at
        negative, zero and large rooms: exact for a ``later`` affine in ``free``, as the
        rule's is."""
        later = self.later.format(free="f", releasing="0", pipelined="0")
        return all(eval(later, {"f": f}) == f for f in (-7, 0, 1, 1000, 2**40))


#: The rule :mod:`gangsched.session.fit` is generated from.
RULE = FitRule()


def fit_source(r: FitRule) -> str:
    """The source of :mod:`gangsched.session.fit`'s rule functions, rendered from ``r``."""
    return "\n\n".join(
        (
            _arrays(r),
            _view(r),
            _scalar(r),
            _reasons(r),
        )
    )


def _arrays(r: FitRule) -> str:
    """Forms over NumPy columns: the occupancy's rows, the view's tables, a few rows."""
    free = r.free_of("occ.arrays.allocatable{sel}", "occ.used{sel}")
    later = r.later_of("free", "occ.releasing{sel}", "occ.pipelined{sel}")
    dev_free = r.free_of("occ.arrays.gpu_capacity[rows][:, None]", "occ.gpu_used[index]")
    dev_later = r.later_of("dev_free", "occ.gpu_releasing[index]", "occ.gpu_pipelined[index]")
    f_dev_free = r.free_of("a.gpu_capacity[a.gpu_node[devices]]", "occ.gpu_used[devices]")
    f_dev_later = r.later_of("free", "occ.gpu_releasing[devices]", "occ.gpu_pipelined[devices]")
    k_dev_free = r.free_of("a.gpu_capacity[rows][:, None]", "occ.gpu_used[idx]")
    k_dev_later = r.later_of("dev_free", "occ.gpu_releasing[idx]", "occ.gpu_pipelined[idx]")
    count_now = r.fit("tmpl.gpu_count", f"(({r.fit('need', 'dev_free')}) & ok_later).sum(axis=1)")
    every = {"sel": ""}
    some = {"sel": "[rows]"}
    return f'''
def idle(occ):
    """What every node has free now (not counting reservations)."""
    return {free.format(**every)}


def future_idle(occ):
    """What every node has free once releases finish."""
    return {r.later_of(free.format(**every), "occ.releasing", "occ.pipelined")}


def node_free(occ, rows=_ALL, *, future):
    """Free resources of the nodes ``rows``: once releases finish with ``future``, else now —
    never into a reservation, so the smaller of now and later."""
    free = {free.format(**some)}
    later = {later.format(**some)}
    return later if future else np.minimum(free, later)


def device_free(occ, *, future, devices=_ALL):
    """Free milli-GPU of each device (flat device order; ``devices`` selects some): once
    releases finish with ``future``, else now — and never into a reservation, so the smaller
    of now and later."""
    a = occ.arrays
    free = {f_dev_free}
    later = {f_dev_later}
    return later if future else np.minimum(free, later)


def _free_rows(occ, rows):
    free = {free.format(**some)}
    later = {later.format(**some)}
    return free, later


def _device_rows(occ, index, rows):
    dev_free = {dev_free}
    dev_later = {dev_later}
    return dev_free, dev_later


def device_table(occ, index, rows, *, future):
    """Free milli-GPU of the devices ``index`` (a table of flat device indices, one row per
    node of ``rows``): once releases finish with ``future``, else the smaller of now and
    later."""
    dev_free = {dev_free}
    dev_later = {dev_later}
    return dev_later if future else np.minimum(dev_free, dev_later)


def _arrays_fit(occ, tmpl, rows, m_all):
    """:func:`resource_fit` of ``rows`` read from the occupancy's arrays."""
    a = occ.arrays
    free = {free.format(**some)}
    later = {later.format(**some)}
    m_eff = np.zeros(0, dtype=np.int64)
    if tmpl.gpu_count:
        m_eff = (gpu_need(a, tmpl) if m_all is None else m_all)[rows]
        req = np.repeat(tmpl.request[None, :], rows.size, axis=0)  # one row per node
        req[:, a.spec.gpu_column] = {r.charge_of("tmpl.gpu_count", "m_eff")}
    else:
        req = tmpl.request  # (n_resources,) broadcast over the rows
    fit_idle = np.asarray(({r.fit("req", "free")}).all(axis=1))
    fit_later = np.asarray(({r.fit("req", "later")}).all(axis=1))
    if tmpl.gpu_count:
        # The rows' devices as a (k, most devices among them) table of flat indices; padding
        # slots read device 0 and never count.
        counts = a.gpu_count[rows]
        slot = np.arange(int(counts.max()) if counts.size else 0)
        real = slot < counts[:, None]
        idx = np.where(real, a.gpu_offset[rows][:, None] + slot, 0)
        dev_free = {k_dev_free}
        dev_later = {k_dev_later}
        need = {r.need("m_eff", vector=True)}[:, None]
        ok_later = ({r.fit("need", "dev_later")}) & real
        fit_idle &= {count_now}
        fit_later &= {r.fit("tmpl.gpu_count", "ok_later.sum(axis=1)")}
    fit_idle &= fit_later
    return fit_idle, fit_later
'''


def _view(r: FitRule) -> str:
    """Forms over the shared view's tables (every node, or a few rows of them)."""
    return f'''
def _view_need(a, milli):
    """Each node's least free milli-GPU per device for a take of ``milli``, as a column."""
    return {r.need("device_take(milli, a.gpu_capacity, a.gpu_sharing)", vector=True)}[:, None]


def _device_room(dev_free, dev_later, real, need):
    """Per row, the devices with room for ``need`` now (and later), and later."""
    ok_later = ({r.fit("need", "dev_later")}) & real
    now = (({r.fit("need", "dev_free")}) & ok_later).sum(axis=1)
    later = ok_later.sum(axis=1)
    return now, later


def _columns_fit(request, table):
    """``request`` fits each row of ``table``, one column at a time (the view's tables are
    stored column by column, so each comparison reads contiguous memory)."""
    ok = np.ones(table.shape[0], dtype=np.bool_)
    for c, q in enumerate(request):
        ok &= {r.fit("q", "table[:, c]")}
    return ok


def _rows_fit(request, table):
    """``request`` fits each of a few rows of ``table``, in one comparison."""
    return np.asarray(({r.fit("np.array(request, dtype=np.int64)", "table")}).all(axis=1))


def _fit_all(a, tmpl, view, m_all, rows=None):
    """:func:`resource_fit` of every node (or of ``rows``), read from ``view``. A few rows
    cost a handful of array operations, like every node."""
    request = tmpl.request.tolist()
    free, later_t = (view.free, view.later) if rows is None else (view.free[rows], view.later[rows])
    # Every node: column by column (the view's tables are stored so); a few rows: at once.
    fits = _columns_fit if rows is None else _rows_fit
    if not tmpl.gpu_count:
        fit_later = fits(request, later_t)
        fit_idle = fits(request, free)
        fit_idle &= fit_later
        return fit_idle, fit_later
    gcol = a.spec.gpu_column
    m_eff = gpu_need(a, tmpl) if m_all is None else m_all
    request[gcol] = 0  # the GPU column is charged per the node's devices, checked below
    charge = {r.charge_of("tmpl.gpu_count", "(m_eff if rows is None else m_eff[rows])")}
    fit_idle = fits(request, free)
    fit_idle &= {r.fit("charge", "free[:, gcol]")}
    fit_later = fits(request, later_t)
    fit_later &= {r.fit("charge", "later_t[:, gcol]")}
    now, later = view.room(a, tmpl.gpu_milli)
    if rows is not None:
        now, later = now[rows], later[rows]
    fit_idle &= {r.fit("tmpl.gpu_count", "now")}
    fit_later &= {r.fit("tmpl.gpu_count", "later")}
    fit_idle &= fit_later
    return fit_idle, fit_later
'''


def _scalar(r: FitRule) -> str:
    """Forms over one node, in plain Python ints (a dozen array operations on one row cost
    more than the numbers)."""
    short_later = r.short("q", r.later_of("free", "rl", "pp"))
    dev_free = r.free_of("cap", "u")
    dev_later = r.later_of(dev_free, "rl", "pp")
    later_free = r.later_of("free", "rl", "pp")
    col_free = r.free_of("alloc[c]", "used[c]")
    col_later = r.later_of(col_free, "releasing[c]", "pipelined[c]")
    col_later_free = r.later_of("free", "releasing[c]", "pipelined[c]")
    # Nothing releasing or reserved on the node's devices: later is free, so the room is
    # free now (only when the rule says so: FitRule.later_is_free_when_idle).
    idle = (
        f"""
    if not any(releasing) and not any(pipelined):
        return [{dev_free} for u in used]"""
        if r.later_is_free_when_idle()
        else ""
    )
    return f'''
def device_rooms(occ, node):
    """Free milli-GPU of each device of ``node`` now and once releases finish, as plain ints
    (:func:`device_free` of one node)."""
    cap = int(occ.arrays.gpu_capacity[node])
    span = occ.arrays.devices(node)
    return [
        ({r.free_of("cap", "u")}, {r.later_of(r.free_of("cap", "u"), "rl", "pp")})
        for u, rl, pp in zip(
            occ.gpu_used[span].tolist(),
            occ.gpu_releasing[span].tolist(),
            occ.gpu_pipelined[span].tolist(),
            strict=True,
        )
    ]


def node_room(occ, node, columns, *, future):
    """What ``node`` has free in ``columns``, as plain ints: once releases finish with
    ``future``, else the smaller of now and later (:func:`node_free` of one node)."""
    alloc = occ.arrays.allocatable[node].tolist()
    used = occ.used[node].tolist()
    releasing = occ.releasing[node].tolist()
    pipelined = occ.pipelined[node].tolist()
    if future:
        return [{col_later} for c in columns]
    return [  # the smaller of now and later, without a call per column
        free if (free := {col_free}) <= (later := {col_later_free}) else later for c in columns
    ]


def device_room(occ, node, cap, *, future):
    """Free milli-GPU of each device of ``node`` (each of ``cap`` milli-GPU) as plain ints:
    once releases finish with ``future``, else the smaller of now and later
    (:func:`device_free` of one node)."""
    span = occ.arrays.devices(node)
    used = occ.gpu_used[span].tolist()
    releasing = occ.gpu_releasing[span].tolist()
    pipelined = occ.gpu_pipelined[span].tolist(){idle}
    if future:
        return [{dev_later} for u, rl, pp in zip(used, releasing, pipelined, strict=True)]
    return [  # the smaller of now and later, without a call per device
        free if (free := {dev_free}) <= (later := {later_free}) else later
        for u, rl, pp in zip(used, releasing, pipelined, strict=True)
    ]


def fit_one(occ, tmpl, i, m_all=None):
    """:func:`resource_fit` of node ``i`` as two bools, in plain ints."""
    a = occ.arrays
    req = tmpl.request.tolist()
    count = tmpl.gpu_count
    m = 0
    if count:
        m = int((gpu_need(a, tmpl) if m_all is None else m_all)[i])
        req[a.spec.gpu_column] = {r.charge_of("count", "m")}
    fit_idle = fit_later = True
    for q, al, u, rl, pp in zip(
        req,
        a.allocatable[i].tolist(),
        occ.used[i].tolist(),
        occ.releasing[i].tolist(),
        occ.pipelined[i].tolist(),
        strict=True,
    ):
        fit_idle = fit_idle and {r.fit("q", r.free_of("al", "u"))}
        fit_later = fit_later and {r.fit("q", r.later_of(r.free_of("al", "u"), "rl", "pp"))}
    if count:
        need = {r.need("m", vector=False)}
        now = later = 0
        for free, free_later in device_rooms(occ, i):
            if {r.fit("need", "free_later")}:
                later += 1
                now += {r.fit("need", "free")}
        fit_idle = fit_idle and {r.fit("count", "now")}
        fit_later = fit_later and {r.fit("count", "later")}
    return fit_idle and fit_later, fit_later


def fits_node(occ, row, node, per_device, gpus, *, future):
    """Whether a request charged ``row`` on ``node`` (taking ``per_device`` milli-GPU of each
    of ``gpus``, which must each have the rule's least room for that take) fits now — or once
    releases finish, with ``future``."""
    a = occ.arrays
    for q, al, u, rl, pp in zip(
        row.tolist(),
        a.allocatable[node].tolist(),
        occ.used[node].tolist(),
        occ.releasing[node].tolist(),
        occ.pipelined[node].tolist(),
        strict=True,
    ):
        free = {r.free_of("al", "u")}
        if {short_later} or (not future and {r.short("q", "free")}):
            return False
    if not gpus:
        return True
    count = int(a.gpu_count[node])
    if any(not 0 <= g < count for g in gpus):
        return False
    cap = int(a.gpu_capacity[node])
    need = {r.need("per_device", vector=False)}
    for d in a.device_index(node, gpus):
        free = {r.free_of("cap", "int(occ.gpu_used[d])")}
        later = {r.later_of("free", "int(occ.gpu_releasing[d])", "int(occ.gpu_pipelined[d])")}
        if {r.short("need", "(later if future else min(free, later))")}:
            return False
    return True


def choose_devices(occ, node, per_device, count, *, future):
    """Device indices on ``node`` for a take of ``per_device`` milli-GPU on each (a device
    has room with the rule's least room for it): a fractional take best-fits onto the
    fullest device with room (ties to the lower index), whole devices are the lowest free
    indices."""
    cap = int(occ.arrays.gpu_capacity[node])
    # free milli-GPU of each device: once releases finish, or the smaller of both
    room = [later if future else min(free, later) for free, later in device_rooms(occ, node)]
    need = {r.need("per_device", vector=False)}
    ok = [i for i, r in enumerate(room) if {r.fit("need", "r")}]
    if per_device < cap:
        ok.sort(key=lambda i: room[i])  # stable: equal rooms keep the lower index first
    return tuple(ok[:count])
'''


def _reasons(r: FitRule) -> str:
    """Which resource column each node is short of once releases finish (the refusal
    reasons), and whether enough of its devices have room then."""
    device_later = r.fit(
        r.need("m_eff", vector=True) + "[seg]", "device_free(occ, future=True, devices=idx)"
    )
    charge = r.charge_of("tmpl.gpu_count", "(m_eff if rows is None else m_eff[rows])")
    gpu_short = r.short(charge, "later[:, g]")
    return f'''
def shortfalls(occ, tmpl, rows, m_all):
    """Per resource column, the nodes of ``rows`` short of ``tmpl``'s request once releases
    finish (the GPU column charged per the node's devices), and the nodes with enough
    devices that have room for it then."""
    a = occ.arrays
    req = np.broadcast_to(tmpl.request, (rows.size, tmpl.request.size)).copy()
    devices_ok = np.ones(rows.size, dtype=np.bool_)
    if tmpl.gpu_count:
        m_eff = (gpu_need(a, tmpl) if m_all is None else m_all)[rows]
        req[:, a.spec.gpu_column] = {r.charge_of("tmpl.gpu_count", "m_eff")}
        idx, seg = a.devices_of(rows)
        later = {device_later}
        devices_ok = {r.fit("tmpl.gpu_count", "a.count_per_row(seg, later, rows.size)")}
    short = {r.short("req", "node_free(occ, rows, future=True)")}
    return list(short.T), devices_ok


def shortfalls_view(a, tmpl, view, m_all, rows=None):
    """:func:`shortfalls` of every node (or of ``rows``), read column by column from
    ``view``."""
    later = view.later if rows is None else view.later[rows]
    request = tmpl.request.tolist()
    short = [{r.short("q", "later[:, c]")} for c, q in enumerate(request)]
    devices_ok = np.ones(later.shape[0], dtype=np.bool_)
    if tmpl.gpu_count:
        g = a.spec.gpu_column
        m_eff = gpu_need(a, tmpl) if m_all is None else m_all
        short[g] = {gpu_short}
        rooms = view.room(a, tmpl.gpu_milli)[1]
        devices_ok = {r.fit("tmpl.gpu_count", "(rooms if rows is None else rooms[rows])")}
    return short, devices_ok
'''


#: The shared-device choice of the FGD study: among a node's devices with room for the take,
#: the one with the least of this key (its free milli-GPU: the tightest), the lower index on
#: ties.
TIGHTEST = "{free}"


def study_fit_source(r: FitRule, tightest: str = TIGHTEST) -> str:
    """The source of :mod:`gangsched.fragmentation.measure`'s fit (the FGD study's nodes:
    free CPU, memory and milli-GPU per device, a GPU model), rendered from ``r``: whether a
    device has room for a take (``room_mask`` over devices, ``has_room`` for one), whether a
    pod fits every node at once (``fit_mask``, over device tables, and ``fit_rooms``, over
    whether enough devices have room, as the caller keeps it: ``enough_rooms`` of counts)
    and one node in plain ints (``fit_row``),
    and the shared device a pod takes (``best_fit_devices`` per row of a device table,
    ``best_fit_device`` of one node's devices), by the key ``tightest`` of a device's
    free milli-GPU."""
    need = r.need("take", vector=False)
    room_any = r.fit("need", "gpu_free")
    count_all = f"({room_any}).sum(axis=1)"
    key_rows = tightest.format(free="gpu_free")
    key_one = tightest.format(free="g")
    return f'''
def room_mask(free, take):
    """Bool per device of ``free`` (free milli-GPU, an array of any shape): the device has
    the rule's least room for a take of ``take`` milli-GPU."""
    return {r.fit(need, "free")}


def has_room(free, take):
    """:func:`room_mask` of one device, in plain ints."""
    return {r.fit(need, "free")}


def enough_rooms(pod, rooms):
    """Bool per node: ``rooms`` (how many of its devices have room for the pod's take) are
    enough for the pod's devices."""
    return {r.fit("pod.num_gpu", "rooms")}


def fit_rooms(free_cpu, free_mem, allowed, enough, pod):
    """``(n_nodes,)`` bool: the pod's CPU and memory fit, its GPU model is allowed
    (``allowed``: bool per node, None for any) and enough devices have room for its take
    (``enough``: bool per node, :func:`enough_rooms`; read for a pod asking devices)."""
    ok = ({r.fit("pod.cpu_milli", "free_cpu")}) & ({r.fit("pod.memory", "free_mem")})
    if pod.num_gpu == 0:
        return ok
    if allowed is not None:
        ok &= allowed
    ok &= enough
    return ok


def fit_mask(free_cpu, free_mem, gpu_free, model_idx, pod):
    """``(n_nodes,)`` bool: the pod's CPU and memory fit, its GPU model is allowed and enough
    devices have room for its take on each (:func:`fit_rooms` of the device table, its
    steps written out: the scorers ask it on every refresh)."""
    ok = ({r.fit("pod.cpu_milli", "free_cpu")}) & ({r.fit("pod.memory", "free_mem")})
    if pod.num_gpu == 0:
        return np.asarray(ok, dtype=np.bool_)
    if pod.allowed_models is not None:
        ok &= pod.allowed_models[model_idx]
    take = pod.gpu_milli
    need = {need}
    ok &= {r.fit("pod.num_gpu", count_all)}
    return np.asarray(ok, dtype=np.bool_)


def fit_row(pod, cpu, memory, model, devices):
    """:func:`fit_mask` of one node, from its free CPU and memory, model index and each
    device's free milli-GPU (``devices``, no padding), in plain ints."""
    if {r.short("pod.cpu_milli", "cpu")} or {r.short("pod.memory", "memory")}:
        return False
    if pod.num_gpu == 0:
        return True
    if pod.allowed_models is not None and not pod.allowed_models[model]:
        return False
    take = pod.gpu_milli
    need = {need}
    count = 0  # a loop costs less than a generator's sum
    for d in devices:
        if {r.fit("need", "d")}:
            count += 1
    return {r.fit("pod.num_gpu", "count")}


def best_fit_devices(gpu_free, pod):
    """Per row of ``gpu_free`` (a node's devices' free milli-GPU), the device a shared pod
    takes: the one with room for its take and the least key, the lowest index on ties;
    -1 where no device has room, everywhere for a pod that shares no device."""
    n = gpu_free.shape[0]
    if not pod.is_shared or gpu_free.shape[1] == 0:  # no node has a device: none has room
        return np.full(n, -1, dtype=np.int64)
    take = pod.gpu_milli
    need = {need}
    room = {room_any}
    key = {key_rows}
    idx = np.argmin(np.where(room, key, np.iinfo(np.int64).max), axis=1).astype(np.int64)
    return np.where(room.any(axis=1), idx, -1)


def best_fit_device(devices, pod):
    """:func:`best_fit_devices` of one node (``devices``: its devices' free milli-GPU), in
    plain ints."""
    if not pod.is_shared:
        return -1
    take = pod.gpu_milli
    need = {need}
    best = -1
    least = 0
    for i, g in enumerate(devices):
        if {r.fit("need", "g")}:
            key = {key_one}
            if best < 0 or key < least:  # strictly less: a tie keeps the lower index
                best, least = i, key
    return best
'''
