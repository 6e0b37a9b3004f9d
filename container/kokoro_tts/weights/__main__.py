"""``python -m kokoro_tts.weights fetch|verify|push``."""

import sys

from .cli import main

sys.exit(main())
