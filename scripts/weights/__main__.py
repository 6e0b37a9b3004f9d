"""``python -m scripts.weights fetch|verify|push|derive-torch``."""

import sys

from .cli import main

sys.exit(main())
