"""tests/images run only when asked (``make test-images`` sets HEADWATER_TEST_IMAGES=1).

A cold image build takes minutes (Debian packages and wheels are downloaded, docs/kubernetes.md
"Images"), so these tests are not collected by the default run (``make test``) unless the
variable is set; ``make test-images`` builds the images first (``make images``).
"""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("HEADWATER_TEST_IMAGES") == "1" else ["test_*.py"]
