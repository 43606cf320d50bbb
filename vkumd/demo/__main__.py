"""``python -m vkumd.demo``."""

import sys

from vkumd.demo.main import main

sys.exit(main())
