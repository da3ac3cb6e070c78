"""``msgboard export`` and ``msgboard report`` as a file for spark-submit::

    spark-submit --master spark://host:7077 spark/pyspark_msgboard/__main__.py \\
        export /shared/snapshots/2026-11-21 /shared/history/2026-11-21
"""

from __future__ import annotations

import sys

from msgboard.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
