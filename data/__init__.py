"""Token data: the shard format (shards.py) and the tools that write shards (download, tokenize_text, synthetic)."""
