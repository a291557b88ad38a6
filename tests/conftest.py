import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).parent))

from tfaot.frontend.tfenv import quiet_tensorflow  # noqa: E402

quiet_tensorflow()
