"""tests/images run only when asked (HEADWATER_TEST_IMAGES=1).

They need root, and a cold image build takes minutes (Debian packages and wheels are downloaded,
docs/kubernetes.md "Images"), so a plain ``pytest`` does not collect them. ``make test`` builds
the images first (``make k8s-build``) and runs them in its second pytest run, with tests/k8s_node;
``make test-images`` runs them alone after ``make images``. Both set the variable.
"""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("HEADWATER_TEST_IMAGES") == "1" else ["test_*.py"]
