"""The PNG bar chart of a comparison (matplotlib, from the optional `bench` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from appliance.bench.servers import ServerKind

if TYPE_CHECKING:
    from appliance.bench.compare import Cell, Scenario


def write_chart(cells: dict[str, dict[str, Cell]], scenarios: tuple[Scenario, ...],
                targets: tuple[ServerKind, ...], path: Path) -> None:
    """Grouped bars, msgs/s on a log scale; a server with no result gets an 'n/a' mark with the reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    width = 0.8 / max(1, len(targets))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.3 * len(scenarios)), 5.5))
    for t_index, target in enumerate(targets):
        xs, heights = [], []
        for s_index, scenario in enumerate(scenarios):
            x = s_index + (t_index - (len(targets) - 1) / 2) * width
            rate = cells[scenario.key][target.name].median_rate()
            if rate is None:
                ax.text(x, 1.0, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
            else:
                xs.append(x)
                heights.append(rate)
        ax.bar(xs, heights, width=width, label=target.name, color=colors[t_index % len(colors)])
    ax.set_yscale("log")
    ax.set_ylim(bottom=1.0)
    ax.set_ylabel("msgs/s (median, log scale)")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels([s.title for s in scenarios], rotation=30, ha="right", fontsize=8)
    ax.set_title("appliance vs nats-server 2.15.1 (n/a: not run or failed, see the table)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
