import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
# Compiled test binaries are cached per session run, not across runs.
os.environ.setdefault("CUVIL_CACHE", tempfile.mkdtemp(prefix="cuvil-test-cache-"))
