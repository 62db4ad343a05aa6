"""From TORCH_TRACE folders: every process's fx_graph_cache_* artifacts (name, key, key components) as JSON lines.

    python3 keys_extract.py OUT.jsonl TRACE_DIR [TRACE_DIR...]
"""
import glob, json, os, re, sys
out = open(sys.argv[1], "w")
for d in sys.argv[2:]:
    for path in sorted(glob.glob(os.path.join(d, "*.log"))):
        lines = open(path, errors="replace").read().split("\n")
        i = 0
        while i < len(lines):
            m = re.search(r'"artifact": \{"name": "(fx_graph_cache_\w+)"', lines[i])
            if m:
                payload = []
                i += 1
                while i < len(lines) and lines[i].startswith("\t"):
                    payload.append(lines[i][1:])
                    i += 1
                try:
                    info = json.loads("\n".join(payload))
                except Exception:
                    info = {"raw": "\n".join(payload)[:2000]}
                out.write(json.dumps(dict(dir=d, file=os.path.basename(path), name=m.group(1), key=info.get("key"),
                                          components=info.get("components"))) + "\n")
                continue
            i += 1
