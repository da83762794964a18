"""Progress bars for long jobs: tqdm.auto, off when the caller asks or when TQDM_DISABLE is set.

tqdm reads TQDM_DISABLE only as the default of `disable`; passing `disable=not progress` would
override it, and papermill batch runs would log every bar update as a line.
"""

import os

from tqdm.auto import tqdm


def shown(progress: bool = True) -> bool:
    """Whether bars are shown: asked for, and not switched off by TQDM_DISABLE."""
    return progress and os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("1", "true", "yes")


def progress_bar(*args, progress: bool = True, **kwargs) -> tqdm:
    return tqdm(*args, disable=not shown(progress), **kwargs)
