#!/usr/bin/env python3
# fake flyt-server for testing run_gpu_tests.sh: listens, accepts, "die" exits
import os, socket, sys, threading
addr = sys.argv[sys.argv.index("--listen") + 1]
if os.environ.get("FAKE_SERVER_FAIL") == "1":
    print("fake server: failing on purpose", flush=True); sys.exit(3)
if addr.startswith("tcp://"):
    host, port = addr[6:].rsplit(":", 1)
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
else:
    path = addr[5:]
    s = socket.socket(socket.AF_UNIX); s.bind(path)
s.listen(16)
print("fake server listening on", addr, "LD_LIBRARY_PATH=", os.environ.get("LD_LIBRARY_PATH"), flush=True)
def handle(c):
    c.settimeout(2)
    try:
        d = c.recv(16)
        if d.startswith(b"die"):
            print("fake server: told to die", flush=True); os._exit(0)
    except Exception:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
