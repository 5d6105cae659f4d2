"""pytest plugin loaded by run.sh (-p anedvd_lcpp_plugin).

llama.cpp's conftest.py starts every ServerPreset once per session
(ServerPreset.load_all) only to download the presets' models from the hub into
the cache. There is no hub here and the shim maps every hub model to a local
file, so that step is a no-op: without this, one preset needing a feature anedvd
lacks (embeddings, reranking, router mode) would error every test of the session.
Nothing else in the suite is changed.
"""
import utils  # the suite's utils.py (run.sh runs pytest from the tests directory)

utils.ServerPreset.load_all = staticmethod(lambda: None)
