"""``msgboard export``, ``report`` and ``nightly`` as a file for spark-submit::

    spark-submit --master spark://host:7077 spark/pyspark_msgboard/__main__.py \\
        nightly /shared/snapshots /shared/history /srv/www/msgboard
"""

from __future__ import annotations

import sys

from msgboard.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
