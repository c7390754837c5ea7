"""Pictures of a plan: the engine table, the GPU map in the terminal, and the same map as SVG.

Users complain most that they cannot see a placement before launching, so the map shows every
GPU: which engines sit on it (shared ones as `A+R`), which instance or rank, and which cells
form one instance or tp group (brackets in text, outlines in SVG). Large clusters collapse runs
of identical nodes so the picture stays readable. Pure: returns renderables and text.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Optional, Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from launcher.planning.ranks import groups
from launcher.spec.builtins import BUILTINS
from launcher.spec.gpuset import format_gpu_set
from launcher.spec.plan import ComponentPlan, Plan

PIPE_WIDTH = 132  # columns when output goes to a file or pipe (rich would wrap at 80)


def console() -> Console:
    """A console that keeps maps and tables unwrapped in logs and pipes as on a terminal."""
    import sys

    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)


def empty_mark() -> str:
    """A GPU nothing sits on: a middle dot, or `.` where stdout cannot encode it (LANG=C in a
    container or a Slurm job: the output never assumes UTF-8)."""
    import sys

    try:
        "\u00b7".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "."
    return "\u00b7"


# declared components take the first free letter of their name, colours from here in turn
PALETTE = ("#c0392b", "#7f8c2b", "#8e5b3a", "#5d6d7e", "#d35400", "#16a085", "#6c3483")
DETAIL_NODES = 16  # up to this many nodes: one lane per engine, with instance/rank numbers
MAX_ROWS = 32  # rows shown in the overview before the middle is summarised
ROW_GPUS = 16  # a node wider than this wraps onto several rows


@dataclass(frozen=True)
class Cell:
    """One engine on one GPU: `label` is the instance index (inference) or the rank (training);
    cells with the same `unit` form one instance or tp group and are framed together."""

    engine: str
    label: str
    unit: int
    size: int
    letter: str = "?"
    color: str = "white"


def marks(plan: Plan) -> dict[str, tuple[str, str]]:
    """component -> (its letter, its colour): the built-ins' own, then for each declared
    component the first letter of its name not taken yet (else any free one) and the next
    colour of the palette."""
    out = {n: (BUILTINS[n].letter, BUILTINS[n].color) for n in plan.components if n in BUILTINS}
    taken = {letter for letter, _ in out.values()}
    spare = iter(PALETTE * (1 + len(plan.components) // len(PALETTE)))
    for name in plan.components:
        if name in out:
            continue
        letter = next(
            (
                c
                for c in name.upper() + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                if c.isalnum() and c not in taken
            ),
            "?",
        )
        taken.add(letter)
        out[name] = (letter, next(spare))
    return out


@dataclass(frozen=True)
class Row:
    """One line of the map: a node (or a run of identical nodes) and the GPUs it shows."""

    title: str
    gpus: tuple[int, ...]
    nodes: int = 1  # nodes this row stands for


def gpu_cells(plan: Plan) -> dict[int, list[Cell]]:
    """gpu -> the components on it, in the plan's order."""
    cells: dict[int, list[Cell]] = {}
    for name, (letter, color) in marks(plan).items():
        for gpu, cell in _engine_cells(plan.components[name], letter, color):
            cells.setdefault(gpu, []).append(cell)
    return cells


def _engine_cells(comp: ComponentPlan, letter: str, color: str) -> list[tuple[int, Cell]]:
    if comp.is_worker:  # one cell per GPU, naming the processes on it (S0-1)
        on: dict[int, list[int]] = {}
        for inst in comp.instances:
            for gpu in inst.gpus:
                on.setdefault(gpu, []).append(inst.index)
        return [
            (gpu, Cell(comp.name, f"{letter}{format_gpu_set(ids)}", ids[0], 1, letter, color))
            for gpu, ids in on.items()
        ]
    if comp.is_inference:
        return [
            (
                gpu,
                Cell(comp.name, f"{letter}{inst.index}", inst.index, len(inst.gpus), letter, color),
            )
            for inst in comp.instances
            for gpu in inst.gpus
        ]
    unit_of = {}
    for index, members in enumerate(groups(comp.ranks, "tp")):
        for r in members:
            unit_of[r] = (index, len(members))
    return [
        (r.gpu, Cell(comp.name, f"{letter}{r.rank}", *unit_of[r.rank], letter, color))
        for r in comp.ranks
    ]


def _signature(cells: dict[int, list[Cell]], gpus: Sequence[int]) -> tuple:
    return tuple(tuple(c.engine for c in cells.get(g, ())) for g in gpus)


def map_rows(plan: Plan, cells: dict[int, list[Cell]]) -> tuple[list[Row], bool]:
    """The rows to draw and whether they are detailed (numbers per engine lane).

    Beyond DETAIL_NODES nodes, runs of nodes with the same engines on the same local GPUs
    become one row, and beyond MAX_ROWS rows the middle is replaced by a count.
    """
    c = plan.cluster
    g = c.gpus_per_node
    chunks = [(lo, min(lo + ROW_GPUS, g)) for lo in range(0, g, ROW_GPUS)]
    detail = c.num_nodes <= DETAIL_NODES
    rows: list[Row] = []
    node = 0
    while node < c.gpu_nodes:
        last = node
        if not detail:
            sig = _signature(cells, range(node * g, node * g + g))
            while (
                last + 1 < c.gpu_nodes
                and _signature(cells, range((last + 1) * g, (last + 2) * g)) == sig
            ):
                last += 1
        title = f"node {node}" if last == node else f"nodes {node}-{last}"
        for lo, hi in chunks:
            part = f" gpu {lo}-{hi - 1}" if len(chunks) > 1 else ""
            rows.append(
                Row(title + part, tuple(range(node * g + lo, node * g + hi)), last - node + 1)
            )
        node = last + 1
    if len(rows) > MAX_ROWS:
        head, tail = rows[: MAX_ROWS // 2], rows[-(MAX_ROWS // 2 - 1) :]
        hidden = sum(r.nodes for r in rows[len(head) : len(rows) - len(tail)]) // len(chunks)
        rows = head + [Row(f"... {hidden} more nodes ...", (), 0)] + tail
    return rows, detail


def _frames(row_cells: list[Cell | None]) -> list[tuple[bool, bool]]:
    """(opens, closes) per cell: a unit's run of cells in this row gets one bracket pair."""
    out = []
    for i, cell in enumerate(row_cells):
        if cell is None or cell.size == 1:
            out.append((False, False))
            continue
        prev = row_cells[i - 1] if i else None
        nxt = row_cells[i + 1] if i + 1 < len(row_cells) else None
        out.append((prev is None or prev.unit != cell.unit, nxt is None or nxt.unit != cell.unit))
    return out


def legend(plan: Plan) -> list[tuple[str, str]]:
    """(engine, words) for each component in the plan, e.g. ('rollout', 'R rollout sglang:d4t2')."""
    out = []
    letters = marks(plan)
    for name, comp in plan.components.items():
        if comp.is_worker:
            where = "CPU" if not comp.gpus else _count(len(comp.gpus), "GPU")
            what = f"{_count(len(comp.instances), 'process', 'processes')} on {where}"
        elif comp.is_inference:
            size = comp.alloc.tp * comp.alloc.pp
            what = f"{_count(len(comp.instances), 'instance')} x {_count(size, 'GPU')}"
        else:
            what = _count(comp.world_size, "rank") + (
                f", tp {comp.alloc.tp}" if comp.alloc.tp > 1 else ""
            )
        out.append((name, f"{letters[name][0]} {name} {comp.alloc} ({what})"))
    return out


def _count(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def sync_summary(plan: Plan) -> list[str]:
    """One line per weight sync: how many rollout shards are fed from the same GPU, the same
    node, or across nodes, and the most shards one rank sends."""
    out = []
    for sync in plan.weight_sync:
        src, dst = plan.components.get(sync.src), plan.components.get(sync.dst)
        if src is None or dst is None or not sync.pairs:
            continue
        gpu_of = {(i.index, k): g for i in dst.instances for k, g in enumerate(i.gpus)}
        node = plan.cluster.node_of
        kinds = {"same GPU": 0, "same node": 0, "across nodes": 0}
        per_rank: dict[int, int] = {}
        for p in sync.pairs:
            a, b = src.ranks[p.rank].gpu, gpu_of[(p.instance, p.tp)]
            kinds[
                "same GPU" if a == b else "same node" if node(a) == node(b) else "across nodes"
            ] += 1
            per_rank[p.rank] = per_rank.get(p.rank, 0) + 1
        shares = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
        out.append(
            f"weight sync {sync.src} -> {sync.dst}: {_count(len(sync.pairs), 'shard')} "
            f"fed ({shares}); at most {max(per_rank.values())} per {sync.src} rank"
        )
    return out


# ----------------------------------------------------------------------------- terminal
def render_table(plan: Plan) -> Table:
    """One row per engine: backend, canonical spec, world size, where it inherited from, GPUs."""
    table = Table(title=f"{plan.mode} plan on {_cluster_words(plan)}", title_justify="left")
    memory = plan.meta.get("memory") or {}
    columns = ["engine", "backend", "spec", "world", "inherited from", "GPUs", "layout"]
    if memory:
        columns.append("GiB/GPU")
    for column in columns:
        table.add_column(column, justify="right" if column in ("world", "GiB/GPU") else "left")
    colors = marks(plan)
    for name, comp in plan.components.items():
        extra = [_engine_gib((memory.get("engines") or {}).get(name, {}))] if memory else []
        table.add_row(
            Text(name, style=f"bold {colors[name][1]}"),
            comp.backend,
            str(comp.alloc),
            str(comp.world_size),
            comp.inherited_from or "",
            format_gpu_set(comp.gpus),
            layout(comp),
            *extra,
        )
    return table


def _engine_gib(entry: dict) -> str:
    """An engine's GiB per GPU with the estimate's range: `64.0 (50.5-68.1)`."""
    need, span = entry.get("per_gpu_gib"), entry.get("range_gib")
    if need is None:
        return "?"
    return f"{need:.1f} ({span[0]:.1f}-{span[1]:.1f})" if span else f"{need:.1f}"


def _span(span: Optional[list]) -> str:
    return f" ({span[0]:.1f}-{span[1]:.1f} by the estimate's range)" if span else ""


def memory_words(plan: Plan) -> list[str]:
    """How the plan's memory stands, in a line or two (empty without a memory section): fits
    (even at the estimate's high end), may not fit (at its low end only), does not fit (not
    even at its low end), or unknown."""
    memory = plan.meta.get("memory") or {}
    if not memory:
        return []
    cap = memory.get("gpu_capacity_gib")
    if memory.get("unknown"):
        return [f"memory: unknown ({memory['unknown']})"]
    verdict = {True: "fits", False: "DOES NOT FIT", None: "unknown"}[memory.get("fits")]
    if memory.get("fits") and memory.get("sure") is False:
        verdict = "may not fit"
    if memory.get("device") == "cpu":
        need = memory.get("host_need_gib")
        return [
            f"memory: {verdict}: the processes need {need:.1f} GiB"
            f"{_span(memory.get('host_need_range_gib'))} of this host's {cap:.1f} GiB available"
            if need is not None and cap is not None
            else f"memory: {verdict}"
        ]
    top = max(memory.get("gpus", []), key=lambda g: g["total_gib"], default=None)
    of = f" of {cap:.1f} GiB (margin {memory.get('margin_gib', 0):.1f})" if cap else ""
    if top is None:
        return [f"memory: {verdict}"]
    span = _span(top.get("range_gib"))
    return [f"memory: {verdict}: the fullest GPU needs {top['total_gib']:.1f} GiB{span}{of}"]


def _gpu_totals(plan: Plan) -> dict[int, float]:
    memory = plan.meta.get("memory") or {}
    return {int(g["gpu"]): float(g["total_gib"]) for g in memory.get("gpus", [])}


def layout(comp: ComponentPlan) -> str:
    """Instances x GPUs for servers; the grid for trainers, and beside it the experts' grid
    (ep, etp, edp) when the engine has one: the MoE hybrid form has two layouts."""
    a = comp.alloc
    if comp.is_worker:
        return _count(len(comp.instances), "process", "processes")
    if comp.is_inference:
        return f"{len(comp.instances)} x {_count(a.tp * a.pp, 'GPU')}"
    grid = (
        " ".join(
            f"{k}{v}" for k, v in (("dp", a.dp), ("tp", a.tp), ("pp", a.pp), ("cp", a.cp)) if v > 1
        )
        or "dp1"
    )
    if a.ep == 1 and a.etp == 1:
        return grid
    return f"{'attn ' if a.hybrid else ''}{grid} | experts ep{a.ep} etp{a.etp} edp{a.edp}"


def _cluster_words(plan: Plan) -> str:
    c = plan.cluster
    kind = "virtual GPU slots (cpu)" if c.device == "cpu" else "GPUs"
    n = c.gpu_nodes
    words = f"{n} node{'s' if n != 1 else ''} x {c.gpus_per_node} {kind}"
    if c.cpu_nodes:
        words += f" + {c.cpu_nodes} CPU-only node{'s' if c.cpu_nodes != 1 else ''}"
    return words


def cpu_node_lines(plan: Plan) -> list[str]:
    """What runs on the nodes without GPUs (and CPU-only processes elsewhere), a line per
    run of nodes that hold the same: `node 2 (no GPUs): E reward x4, G agent x100`."""
    colors = marks(plan)
    per_node: dict[int, dict[str, int]] = {}
    for name, comp in plan.components.items():
        if not comp.is_worker or comp.gpus:
            continue
        runs = getattr(comp.instances, "runs", None)
        items = (
            [(node, count) for _, count, _, node in runs]
            if runs is not None
            else [(i.nodes[0], 1) for i in comp.instances]
        )
        for node, count in items:
            here = per_node.setdefault(node, {})
            here[name] = here.get(name, 0) + count
    out: list[str] = []
    nodes = sorted(per_node)
    i = 0
    while i < len(nodes):
        j = i
        while (
            j + 1 < len(nodes)
            and nodes[j + 1] == nodes[j] + 1
            and per_node[nodes[j + 1]] == per_node[nodes[i]]
        ):
            j += 1
        where = f"node {nodes[i]}" if i == j else f"nodes {nodes[i]}-{nodes[j]}"
        gpu = "no GPUs" if nodes[i] >= plan.cluster.gpu_nodes else "CPU processes"
        what = ", ".join(f"{colors[n][0]} {n} x{k}" for n, k in per_node[nodes[i]].items())
        out.append(f"{where} ({gpu}): {what}")
        i = j + 1
    return out


def render_gpu_map(plan: Plan) -> Group:
    """Row per node, column per GPU: a combined line (`A+R`) and, for small clusters, one lane
    per engine with instance or rank numbers and [brackets] around instances and tp groups."""
    cells = gpu_cells(plan)
    rows, detail = map_rows(plan, cells)
    tokens = [2 * len(cs) for cs in cells.values()]  # "A+R": two characters per engine
    if detail:
        tokens += [len(c.label) + 2 for cs in cells.values() for c in cs]  # "[A12]"
    width = max(tokens + [4]) + 1
    title_width = (
        max(
            [len(r.title) for r in rows]
            + [9]
            + ([len(n) + 3 for n in plan.components] if detail else [])
        )
        + 2
    )
    lines = [Text(f"GPU map: {plan.mode}, {_cluster_words(plan)}", style="bold")]
    gpu_cols = rows[0].gpus if rows and rows[0].gpus else ()
    lines.append(
        Text(
            " " * title_width
            + "".join(f"gpu{plan.cluster.local_of(gpu)}".ljust(width) for gpu in gpu_cols),
            style="dim",
        )
    )
    for row in rows:
        lines.extend(_row_lines(plan, row, cells, detail, title_width, width))
    lines.extend(Text(line, style="dim italic") for line in cpu_node_lines(plan))
    lines.append(Text(""))
    lines.extend(Text(w, style="bold") for w in memory_words(plan))
    colors = marks(plan)
    lines.extend(Text(text, style=colors[name][1]) for name, text in legend(plan))
    lines.extend(Text(line) for line in sync_summary(plan))
    lines.append(
        Text(
            "numbers: instance (rollout) or rank (training); [..] one instance or "
            "tp group; A+R: engines sharing a GPU",
            style="dim",
        )
    )
    return Group(*lines)


def _row_lines(
    plan: Plan, row: Row, cells: dict[int, list[Cell]], detail: bool, title_width: int, width: int
) -> list[Text]:
    """One node's lines of the map: its GPUs' letters, its lanes, its GiB per GPU."""
    empty = empty_mark()
    line = Text(row.title.ljust(title_width), style="bold" if row.gpus else "dim italic")
    for gpu in row.gpus:
        here = cells.get(gpu, [])
        token = Text(no_wrap=True)
        for i, cell in enumerate(here):
            if i:
                token.append("+")
            token.append(cell.letter, style=f"bold {cell.color}")
        if not here:
            token.append(empty, style="dim")
        token.append(" " * (width - len(token)))
        line.append_text(token)
    lines = [line]
    if detail and row.gpus:
        lines.extend(_lanes(plan, row, cells, title_width, width))
    totals = _gpu_totals(plan)
    if totals and row.gpus:
        cap = (plan.meta.get("memory") or {}).get("gpu_capacity_gib")
        gib = Text("  GiB".ljust(title_width), style="dim")
        for gpu in row.gpus:
            value = totals.get(gpu)
            over = plan.cluster.device == "cuda" and cap is not None and (value or 0) > cap
            gib.append(
                (f"{value:.1f}" if value is not None else empty).ljust(width),
                style="bold red" if over else "dim",
            )
        lines.append(gib)
    return lines


def _lanes(
    plan: Plan, row: Row, cells: dict[int, list[Cell]], title_width: int, width: int
) -> list[Text]:
    out = []
    for name in plan.components:
        lane = [next((c for c in cells.get(g, []) if c.engine == name), None) for g in row.gpus]
        if not any(lane):
            continue
        line = Text(f"  {name}".ljust(title_width), style="dim")
        for cell, (opens, closes) in zip(lane, _frames(lane)):
            if cell is None:
                line.append(empty_mark().ljust(width), style="dim")
                continue
            text = ("[" if opens else " ") + cell.label + ("]" if closes else "")
            line.append(text.ljust(width), style=cell.color)
        out.append(line)
    return out


# ----------------------------------------------------------------------------- SVG
CELL_W, CELL_GAP, LANE_H, HEAD_H, LABEL_W, MARGIN = 60, 10, 22, 18, 92, 16
CHAR_W = 0.62  # monospace advance per font-size unit, to size the picture to its text
FONT = 'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace"'


def render_svg(plan: Plan) -> str:
    """The GPU map as standalone SVG text: the same rows, lanes and frames as the terminal map,
    with engines as coloured cells and instances / tp groups outlined."""
    cells = gpu_cells(plan)
    rows, detail = map_rows(plan, cells)
    colors = {name: color for name, (_, color) in marks(plan).items()}
    ncols = max((len(r.gpus) for r in rows), default=1)
    note = (
        "numbers: instance (rollout) or rank (training); outlined: one instance or tp "
        "group; A+R: engines sharing a GPU"
    )
    syncs = sync_summary(plan) + memory_words(plan)
    words = [w for _, w in legend(plan)] + syncs + [note]
    label_w = max([LABEL_W] + [int(len(r.title) * 12 * CHAR_W) + 16 for r in rows if r.gpus])
    left = MARGIN + label_w
    grid = label_w + ncols * (CELL_W + CELL_GAP)
    width = int(max(2 * MARGIN + grid, 2 * MARGIN + 24 + max(len(w) for w in words) * 12 * CHAR_W))
    body: list[str] = []
    y = MARGIN
    body.append(
        _text(
            MARGIN, y + 14, f"GPU map: {plan.mode}, {_cluster_words(plan)}", size=15, weight="bold"
        )
    )
    y += 30
    frame = SvgFrame(plan, cells, detail, left, grid, 16 if _gpu_totals(plan) else 0)
    for row in rows:
        drawn, y = _row_svg(frame, row, y)
        body.extend(drawn)
    y += 4
    for name, said in legend(plan):
        body.append(
            f'<rect x="{MARGIN}" y="{y}" width="14" height="14" rx="3" fill="{colors[name]}"/>'
        )
        body.append(_text(MARGIN + 20, y + 11, said, size=12))
        y += 20
    for line in syncs:
        body.append(_text(MARGIN, y + 12, line, size=12))
        y += 20
    body.append(_text(MARGIN, y + 12, note, size=11, fill="#555"))
    height = y + 20 + MARGIN
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


@dataclass(frozen=True)
class SvgFrame:
    """What every node's box of the SVG map shares: the plan, its cells, whether lanes are
    drawn, where the grid starts and how wide it is, the height of the GiB line."""

    plan: Plan
    cells: dict[int, list[Cell]]
    detail: bool
    left: int
    grid: int
    mem_h: int


def _row_svg(f: SvgFrame, row: Row, y: int) -> tuple[list[str], int]:
    """One node's box of the SVG map, and where the next one starts."""
    if not row.gpus:
        return [_text(MARGIN, y + 14, row.title, size=12, fill="#666", italic=True)], y + 26
    lanes = list(f.plan.components)
    height = HEAD_H + (len(lanes) * (LANE_H + 4) if f.detail else LANE_H + 4) + 6 + f.mem_h
    body = [
        f'<rect x="{MARGIN - 6}" y="{y - 4}" width="{f.grid + 2}" '
        f'height="{height}" rx="6" fill="#f7f8fa" stroke="#d5d9df"/>',
        _text(MARGIN, y + 13, row.title, size=12, weight="bold"),
    ]
    for col, gpu in enumerate(row.gpus):
        x = f.left + col * (CELL_W + CELL_GAP)
        here = f.cells.get(gpu, [])
        body.append(
            _text(x + 2, y + 12, f"gpu{f.plan.cluster.local_of(gpu)}", size=10, fill="#666")
        )
        if len(here) > 1:
            body.append(
                _text(
                    x + CELL_W - 2,
                    y + 12,
                    _letters_svg(here),
                    size=10,
                    weight="bold",
                    anchor="end",
                    fill="#222",
                    raw=True,
                )
            )
    top = y + HEAD_H
    if f.detail:
        colors = {name: color for name, (_, color) in marks(f.plan).items()}
        for i, name in enumerate(lanes):
            ly = top + i * (LANE_H + 4)
            body.append(_text(MARGIN + 8, ly + 15, name, size=11, fill=colors[name]))
            lane = [
                next((c for c in f.cells.get(g, []) if c.engine == name), None) for g in row.gpus
            ]
            body.extend(_lane_svg(lane, f.left, ly))
    else:
        body.extend(_overview_svg(row, f.cells, f.left, top))
    body.extend(_gib_svg(f, row, y + height - 8))
    return body, y + height + 10


def _gib_svg(f: SvgFrame, row: Row, y: int) -> list[str]:
    """The GiB each GPU of a node needs, red where it is more than the card holds."""
    totals = _gpu_totals(f.plan)
    cap = (f.plan.meta.get("memory") or {}).get("gpu_capacity_gib")
    out = []
    for col, gpu in enumerate(row.gpus if totals else ()):
        value = totals.get(gpu)
        over = f.plan.cluster.device == "cuda" and cap is not None and (value or 0) > cap
        x = f.left + col * (CELL_W + CELL_GAP)
        out.append(
            _text(
                x + 2,
                y,
                "·" if value is None else f"{value:.1f} GiB",
                size=10,
                fill="#c0392b" if over else "#555",
                weight="bold" if over else "normal",
            )
        )
    return out


def _lane_svg(lane: list[Cell | None], left: int, y: int) -> list[str]:
    out = []
    start = 0
    for col, (cell, (opens, closes)) in enumerate(zip(lane, _frames(lane))):
        x = left + col * (CELL_W + CELL_GAP)
        if cell is None:
            out.append(
                f'<rect x="{x}" y="{y}" width="{CELL_W}" height="{LANE_H}" rx="3" fill="#eceef1"/>'
            )
            continue
        out.append(
            f'<rect x="{x}" y="{y}" width="{CELL_W}" height="{LANE_H}" rx="3" fill="{cell.color}"/>'
        )
        out.append(
            _text(
                x + CELL_W // 2,
                y + 15,
                cell.label,
                size=11,
                fill="white",
                weight="bold",
                anchor="middle",
            )
        )
        if opens:
            start = x
        if closes:
            out.append(
                f'<rect x="{start - 3}" y="{y - 2}" width="{x + CELL_W - start + 6}" '
                f'height="{LANE_H + 4}" rx="5" fill="none" stroke="#1d2733" '
                'stroke-width="1.5"/>'
            )
    return out


def _overview_svg(row: Row, cells: dict[int, list[Cell]], left: int, y: int) -> list[str]:
    out = []
    for col, gpu in enumerate(row.gpus):
        x = left + col * (CELL_W + CELL_GAP)
        here = cells.get(gpu, [])
        if not here:
            out.append(
                f'<rect x="{x}" y="{y}" width="{CELL_W}" height="{LANE_H}" rx="3" fill="#eceef1"/>'
            )
            continue
        part = CELL_W / len(here)
        for i, cell in enumerate(here):
            out.append(
                f'<rect x="{x + i * part:.1f}" y="{y}" width="{part:.1f}" '
                f'height="{LANE_H}" fill="{cell.color}"/>'
            )
        out.append(
            _text(
                x + CELL_W // 2,
                y + 15,
                "+".join(c.letter for c in here),
                size=11,
                fill="white",
                weight="bold",
                anchor="middle",
            )
        )
    return out


def _letters_svg(here: list[Cell]) -> str:
    """`A+R` with each letter in its engine's colour (tspans)."""
    return "+".join(f'<tspan fill="{c.color}">{c.letter}</tspan>' for c in here)


def _text(
    x: float,
    y: float,
    words: str,
    size: int = 12,
    fill: str = "#111",
    weight: str = "normal",
    anchor: str = "start",
    italic: bool = False,
    raw: bool = False,
) -> str:
    """A <text> element; `raw` means `words` is already SVG markup (tspans)."""
    style = ' font-style="italic"' if italic else ""
    return (
        f'<text x="{x}" y="{y}" {FONT} font-size="{size}" font-weight="{weight}" '
        f'fill="{fill}" text-anchor="{anchor}"{style}>{words if raw else escape(words)}</text>'
    )
