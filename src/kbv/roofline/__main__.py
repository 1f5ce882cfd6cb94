"""``python -m kbv.roofline``: the roofline table of problems (``kbv.roofline.main``)."""

import sys

from kbv.roofline import main

sys.exit(main())
