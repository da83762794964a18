"""Regenerate the static figures of docs/ (needs kaleido and a Chrome: Debian's chromium on PATH).

    python docs/make_figures.py                          # docs/reward.png
    python docs/make_figures.py --report runs/demo       # + docs/report-*.png from a run's report.json
"""

import argparse
from pathlib import Path

from dragonlab.evaluation.reward import RewardConfig
from dragonlab.reporting.plots import reward_shape_figure

DOCS = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="a run directory (or its report/) whose figures to export")
    args = parser.parse_args()
    out = DOCS / "reward.png"
    reward_shape_figure(RewardConfig()).write_image(out, scale=2)
    print(f"wrote {out}")
    if args.report:
        from dragonlab.reporting.report import read_report
        from dragonlab.reporting.report_html import write_pngs

        folder = args.report / "report" if (args.report / "report").is_dir() else args.report
        for path in write_pngs(read_report(folder), DOCS / "figures-tmp"):
            target = DOCS / f"report-{path.name}"
            path.replace(target)
            print(f"wrote {target}")
        (DOCS / "figures-tmp").rmdir()


if __name__ == "__main__":
    main()
