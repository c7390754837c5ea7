"""The run as a picture: reward, loss and step time against the step, from `metrics.jsonl`,
with each restart and requeue marked where the trainers started again; a reward sparkline for
the terminal; a sweep's points in one picture.

matplotlib is imported by `draw` and `draw_sweep` only (the trainer's rank 0 at the end of a
run, the CLI's `status --plot` and sweep summary), never on the launcher's start-up path; the
sparkline is stdlib. Without matplotlib `draw` raises PlotUnavailable saying what to install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

PANELS = (("reward", "reward"), ("loss", "loss"), ("step_time_s", "step time (s)"))
BARS = "▁▂▃▄▅▆▇█"
INSTALL = "pip install 'areal-launch[plot]'"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed where the picture is drawn."""


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """`values` as block characters (the last `width` of them), lowest to highest."""
    shown = [float(v) for v in values][-width:]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = high - low
    return "".join(
        BARS[0 if span == 0 else round((v - low) / span * (len(BARS) - 1))] for v in shown
    )


def starts(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(first step, restart count) of each start after the first: where to draw a mark."""
    out, last = [], None
    for r in records:
        restart = int(r.get("restart", 0))
        if last is not None and restart != last:
            out.append((int(r["step"]), restart))
        last = restart
    return out


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(f"no picture: matplotlib is not installed here ({INSTALL})") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    title: str,
    labels: Optional[Mapping[int, str]] = None,
) -> Path:
    """A PNG of the PANELS that `records` hold; `labels` names the starts by restart count
    ("requeue 2"), else "restart N". Returns its path."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    panels = [(key, name) for key, name in PANELS if any(key in r for r in records)]
    fig, axes = plt.subplots(
        len(panels) or 1,
        1,
        figsize=(7, 1.0 + 2.0 * max(1, len(panels))),
        sharex=True,
        squeeze=False,
    )
    for ax, (key, name) in zip(axes[:, 0], panels):
        points = [(r["step"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        for step, restart in starts(records):
            ax.axvline(step - 0.5, color="tab:red", linestyle="--", linewidth=1)
            if ax is axes[0, 0]:
                text = (labels or {}).get(restart, f"restart {restart}")
                ax.annotate(
                    text,
                    (step - 0.5, 1.0),
                    xycoords=("data", "axes fraction"),
                    color="tab:red",
                    fontsize=8,
                    ha="left",
                    va="top",
                )
    axes[-1, 0].set_xlabel("step")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, path)


def draw_sweep(
    points: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], path: str | Path, title: str
) -> Path:
    """One PNG for a sweep: each panel holds one line per point (label, its records)."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(
        len(PANELS), 1, figsize=(7, 1.0 + 2.0 * len(PANELS)), sharex=True, squeeze=False
    )
    for ax, (key, name) in zip(axes[:, 0], PANELS):
        for label, records in points:
            shown = [(r["step"], r[key]) for r in records if key in r]
            ax.plot(
                [p[0] for p in shown], [p[1] for p in shown], marker="o", markersize=3, label=label
            )
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("step")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    out = Path(path)
    part = out.with_name(f".{out.name}.part.png")
    fig.savefig(part, dpi=100)
    plt.close(fig)
    part.replace(out)
    return out
