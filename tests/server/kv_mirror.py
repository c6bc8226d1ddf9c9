"""A router's index of one cinder replica built from its KV cache events alone, as llm-d's
indexer builds it: a BlockStored block's parent must resolve, removal is by the engine's key
(the page hash), AllBlocksCleared empties it. Decodes each frame strictly as vLLM's schema
defines it (vllm/distributed/kv_events.py: array_like tagged structs, or the same structs as maps
with the tag under "type") and reports what breaks
the schema through check(ok, what). Used by kv_events.py and fleet.py."""
import msgpack


class Mirror:
    def __init__(self, page, check):
        self.page = page
        self.check = check
        self.media = {"GPU": set(), "CPU": set()}
        self.next_seq = 0
        self.topic = None
        self.batches = {}  # seq -> payload, for the replay check
        self.kinds = set()
        self.block = {}  # (parent hash, page's token ids) -> hash: what a router matches prompts by

    def apply(self, topic, seq_b, payload):
        """One frame [topic, 8-byte big-endian seq, msgpack KVEventBatch]; returns (seq, events)."""
        check = self.check
        check(len(seq_b) == 8, "seq frame of 8 bytes")
        seq = int.from_bytes(seq_b, "big", signed=True)
        check(seq == self.next_seq, "seq %d contiguous (expected %d)" % (seq, self.next_seq))
        self.next_seq = seq + 1
        self.topic = topic
        self.batches[seq] = payload
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        check(isinstance(batch, list) and len(batch) == 3, "batch [ts, events, rank]")
        ts, events, rank = batch
        check(isinstance(ts, float) and rank == 0 and isinstance(events, list) and events, "batch fields")
        for ev in events:
            self.event(seq, ev)
        return seq, events

    FIELDS = {"BlockStored": ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"],
              "BlockRemoved": ["type", "block_hashes", "medium"], "AllBlocksCleared": ["type"]}

    def event(self, seq, ev):
        check, page = self.check, self.page
        if isinstance(ev, dict):  # the map encoding: the same fields by name, the tag under "type"
            keys = list(ev)
            check(keys == self.FIELDS.get(ev.get("type"), []), "seq %d: map event keys %s" % (seq, keys))
            ev = [ev["type"]] + [ev[k] for k in keys[1:]]
        tag = ev[0]
        self.kinds.add(tag)
        if tag == "AllBlocksCleared":
            check(len(ev) == 1, "AllBlocksCleared arity")
            for m in self.media.values():
                m.clear()
            return
        if tag == "BlockStored":
            check(len(ev) == 7, "BlockStored has 7 fields")
            _, hashes, parent, tokens, block_size, lora_id, medium = ev
            check(block_size == page and lora_id is None, "block_size is the page size, lora_id nil")
            check(len(tokens) == len(hashes) * page and len(tokens) % page == 0, "token_ids: blocks x page size")
            check(all(isinstance(t, int) and t >= 0 for t in tokens), "token ids")
            check(medium in self.media, "medium GPU/CPU")
            check(parent is None or (0 < parent < 2**63 and any(parent in m for m in self.media.values())),
                  "seq %d: the parent %s resolves" % (seq, parent))
            for i, h in enumerate(hashes):
                check(isinstance(h, int) and 0 < h < 2**63, "hash < 2^63")
                check(h not in self.media[medium], "seq %d: %d stored twice in %s" % (seq, h, medium))
                self.media[medium].add(h)
                self.block[(parent, tuple(tokens[i * page:(i + 1) * page]))] = h
                parent = h
            return
        check(tag == "BlockRemoved" and len(ev) == 3, "BlockRemoved has 3 fields (got %r)" % (ev[:1],))
        _, hashes, medium = ev
        check(medium in self.media, "medium GPU/CPU")
        for h in hashes:
            check(h in self.media[medium], "seq %d: removed %d was in %s" % (seq, h, medium))
            self.media[medium].discard(h)

    def same_as(self, pages):
        """Whether the mirror holds exactly the pages of the server's listing (/v1/cache?pages=1's
        "pages": hashes per tier)."""
        return self.media["GPU"] == set(pages["gpu"]) and self.media["CPU"] == set(pages["cpu"])

    def cached(self, ids):
        """Tokens of ids a router expects this replica to reuse: whole pages whose chain of
        stored blocks, from the root, is on the GPU or in host memory."""
        parent, n, page = None, 0, self.page
        while n + page <= len(ids):
            h = self.block.get((parent, tuple(ids[n:n + page])))
            if h is None or not (h in self.media["GPU"] or h in self.media["CPU"]):
                break
            parent, n = h, n + page
        return n
