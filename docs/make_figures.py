"""Regenerate the static figures of docs/: `python docs/make_figures.py` (needs kaleido and a Chrome)."""

from pathlib import Path

from dragonlab.plots import reward_shape_figure
from dragonlab.reward import RewardConfig

DOCS = Path(__file__).resolve().parent


def main() -> None:
    out = DOCS / "reward.png"
    reward_shape_figure(RewardConfig()).write_image(out, scale=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
