#!/usr/bin/python3
"""Trains the embedded demo model (models/demo.gguf): a small Llama on tinyshakespeare.

Dependencies (only for re-training; neither the build, CI nor users need them):
    apt-get install python3-torch python3-numpy libopenblas0-pthread
Debian 12 ships torch 1.13; run this with Debian's interpreter (/usr/bin/python3), not a pyenv one.

    /usr/bin/python3 tools/train_demo_model.py --minutes 18 --dropout 0.1   # the shipped run (models/demo.md)
    /usr/bin/python3 tools/train_demo_model.py --export-only    # re-export the last checkpoint

What it does, and why each part is shaped the way it is:
  * Tokenizer: BPE merges learnt on the training split, then shipped as a SentencePiece-style
    ("llama") vocabulary: score = -merge_rank, every intermediate merge result is a token, byte
    fallback tokens <0x00>..<0xFF>. The corpus is tokenized with llama.cpp's SPM algorithm (merge
    the adjacent pair whose concatenation is a token with the highest score, leftmost on ties), so
    an engine implementing that algorithm reproduces the training tokenization exactly. Merges
    never cross a chunk boundary (chunks: optional "▁" then a run of letters or a run of other
    non-space characters; "\n" alone), so every vocabulary token matches
    ▁?(letters+|non-letters+) and the corpus can be tokenized chunk by chunk with a cache.
    add_space_prefix is false, so a prompt that starts a line tokenizes as it does in the corpus.
  * Model: llama (RMSNorm, RoPE over adjacent pairs (x[2i], x[2i+1]) with theta_i =
    base^(-2i/head_dim) = llama.cpp's "normal" rope, SwiGLU, GQA). Trained directly in the GGUF
    layout, so Q/K need no permutation on export. Tied embeddings during training; exported as
    token_embd.weight only (no output.weight), as tied llama GGUFs do.
  * Export: 2-D weights as Q8_0 (per 32 values: f16 d = max|x|/127, int8 q = round(x/d)), norms
    F32. Every reported loss is computed in float32 with the dequantized exported weights, i.e. the
    numbers an engine computing with exactly these weights gets.
"""

import argparse
import collections
import json
import math
import os
import re
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SPACE = "\u2581"  # "▁", SentencePiece's visible space
UNK, BOS, EOS = 0, 1, 2
N_SPECIAL = 3
BYTE_BASE = N_SPECIAL  # <0x00> .. <0xFF> follow the specials
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6

# ======== Tokenizer ========

CHUNK_RE = re.compile(SPACE + "?[A-Za-z]+|" + SPACE + "?[^A-Za-z" + SPACE + "\n]+|" + SPACE +
                      "|\n")


def to_spm_text(text):
    # add_space_prefix = false: only replace spaces.
    return text.replace(" ", SPACE)


def chunks_of(spm_text):
    out = CHUNK_RE.findall(spm_text)
    assert sum(len(c) for c in out) == len(spm_text), "chunk regex must cover the text"
    return out


def learn_bpe(chunk_counts, n_merges):
    """Classic BPE over chunk frequencies; returns merged strings in rank order."""
    words = [list(c) for c in chunk_counts]
    freqs = list(chunk_counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += freqs[wi]
            where[(a, b)].add(wi)
    merges = []
    for _ in range(n_merges):
        if not pair_counts:
            break
        # Highest count; ties broken by the pair's text so the vocabulary is deterministic.
        best = max(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))
        if best[1] < 2:
            break
        pair = best[0]
        merged = pair[0] + pair[1]
        merges.append(merged)
        for wi in list(where[pair]):
            w = words[wi]
            f = freqs[wi]
            for a, b in zip(w, w[1:]):
                pair_counts[(a, b)] -= f
                if pair_counts[(a, b)] <= 0:
                    del pair_counts[(a, b)]
                where[(a, b)].discard(wi)
            nw = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    nw.append(merged)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            words[wi] = nw
            for a, b in zip(nw, nw[1:]):
                pair_counts[(a, b)] += f
                where[(a, b)].add(wi)
    return merges


class SpmTokenizer:
    """llama.cpp's SPM tokenizer over this vocabulary (no special-token parsing)."""

    def __init__(self, tokens, scores, types):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.id_of = {}
        for i, t in enumerate(tokens):
            if types[i] in (TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE):
                self.id_of.setdefault(t, i)
        self.cache = {}

    def encode_chunk(self, chunk):
        ids = self.cache.get(chunk)
        if ids is not None:
            return ids
        syms = list(chunk)  # the text is ASCII + "▁": one symbol per code point
        while len(syms) > 1:
            best_i, best_score = -1, None
            for i in range(len(syms) - 1):
                tid = self.id_of.get(syms[i] + syms[i + 1])
                if tid is None:
                    continue
                s = self.scores[tid]
                if best_score is None or s > best_score:  # strict: leftmost wins ties
                    best_i, best_score = i, s
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        ids = []
        for s in syms:
            tid = self.id_of.get(s)
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(BYTE_BASE + b for b in s.encode("utf-8"))
        self.cache[chunk] = ids
        return ids

    def encode(self, text, add_bos=False):
        ids = [BOS] if add_bos else []
        for c in chunks_of(to_spm_text(text)):
            ids.extend(self.encode_chunk(c))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.types[i]
            if t == TYPE_BYTE:
                out.append(i - BYTE_BASE)
            elif t == TYPE_NORMAL:
                out.extend(self.tokens[i].replace(SPACE, " ").encode("utf-8"))
        return out.decode("utf-8", errors="replace")


def build_vocab(train_text, vocab_size):
    chunk_counts = collections.Counter(chunks_of(to_spm_text(train_text)))
    chars = sorted({ch for c in chunk_counts for ch in c if ch != "\n"})
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + chars
    scores = [0.0] * len(tokens)
    types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * 256
    types += [TYPE_NORMAL] * len(chars)
    n_merges = vocab_size - len(tokens)
    chunk_counts.pop("\n", None)
    merges = learn_bpe(chunk_counts, n_merges)
    for rank, m in enumerate(merges):
        assert m not in tokens
        tokens.append(m)
        scores.append(-float(rank))
        types.append(TYPE_NORMAL)
    # Guarantee that no token can straddle a chunk boundary (see module docstring).
    tok_re = re.compile(SPACE + "?([A-Za-z]+|[^A-Za-z" + SPACE + "\n]+)|" + SPACE)
    for t, ty in zip(tokens, types):
        if ty == TYPE_NORMAL:
            assert tok_re.fullmatch(t), repr(t)
    return tokens, scores, types


# ======== Model ========


class Config:
    def __init__(self, **kw):
        self.vocab_size = 1024
        self.dim = 256
        self.n_layers = 4
        self.n_heads = 8
        self.n_kv_heads = 4
        self.ffn_dim = 704
        self.ctx = 256
        self.rope_base = 10000.0
        self.norm_eps = 1e-5
        self.dropout = 0.0
        self.__dict__.update(kw)

    @property
    def head_dim(self):
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n):
    hd = cfg.head_dim
    inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd/2]
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]  # [n][hd/2]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    # x: [B][H][T][hd]; rotate adjacent pairs (x[2i], x[2i+1]) by theta_i * pos.
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        b, t, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = self.wk(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(h).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        g = cfg.n_heads // cfg.n_kv_heads  # query head j reads kv head j // g (llama.cpp GQA)
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask
        att = self.drop(torch.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, cfg.n_heads * hd)
        x = x + self.drop(self.wo(y))
        h = self.ffn_norm(x)
        return x + self.drop(self.w_down(F.silu(self.w_gate(h)) * self.w_up(h)))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        cos, sin = rope_tables(cfg, cfg.ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for blk in self.blocks:  # GPT-2 style scaled init of the residual projections
            for lin in (blk.wo, blk.w_down):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):  # ids: [B][T] -> logits [B][T][vocab]
        t = ids.shape[1]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.tok(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.norm(x) @ self.tok.weight.t()  # tied output


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ======== Q8_0 and GGUF ========


def quantize_q8_0(w):
    """w: float32 [rows][cols], cols % 32 == 0 -> (bytes, dequantized float32 array)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    rows, cols = w.shape
    assert cols % 32 == 0
    blocks = w.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    d16 = d.astype(np.float16)
    rec = np.empty(len(blocks), dtype=[("d", "<f2"), ("q", "i1", 32)])
    rec["d"] = d16
    rec["q"] = q
    deq = (d16.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(rows, cols)
    return rec.tobytes(), deq


GGUF_T = {"u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9}
GGML_F32, GGML_Q8_0 = 0, 8


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, kind, value):
    out = _str(key)
    if kind == "u32":
        out += struct.pack("<II", GGUF_T["u32"], value)
    elif kind == "f32":
        out += struct.pack("<If", GGUF_T["f32"], value)
    elif kind == "bool":
        out += struct.pack("<IB", GGUF_T["bool"], 1 if value else 0)
    elif kind == "str":
        out += struct.pack("<I", GGUF_T["str"]) + _str(value)
    elif kind == "str[]":
        out += struct.pack("<IIQ", GGUF_T["arr"], GGUF_T["str"], len(value))
        out += b"".join(_str(v) for v in value)
    elif kind == "f32[]":
        out += struct.pack("<IIQ", GGUF_T["arr"], GGUF_T["f32"], len(value))
        out += np.asarray(value, dtype="<f4").tobytes()
    elif kind == "i32[]":
        out += struct.pack("<IIQ", GGUF_T["arr"], GGUF_T["i32"], len(value))
        out += np.asarray(value, dtype="<i4").tobytes()
    else:
        raise ValueError(kind)
    return out


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: [(key, kind, value)]; tensors: [(name, ggml_type, ne list, bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(_kv(*kv) for kv in kvs)
    offset = 0
    infos = b""
    for name, ty, ne, data in tensors:
        infos += _str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        infos += struct.pack("<IQ", ty, offset)
        offset += len(data)
        offset += (-offset) % alignment
    body = head + infos
    body += b"\0" * ((-len(body)) % alignment)
    for _, _, _, data in tensors:
        body += data + b"\0" * ((-len(data)) % alignment)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, path)
    return len(body)


def read_gguf_tensors(path):
    """Minimal reader used to verify the written file: (tokens, {name: (type, ne, bytes)})."""
    buf = open(path, "rb").read()
    pos = 4
    assert buf[:4] == b"GGUF"

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v

    def take_str():
        nonlocal pos
        (n,) = take("<Q")
        pos += n
        return buf[pos - n:pos].decode("utf-8")

    version, n_t, n_kv = take("<IQQ")
    assert version == 3
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    tokens = None
    for _ in range(n_kv):
        key = take_str()
        (ty,) = take("<I")
        if ty == 8:
            take_str()
        elif ty == 9:
            ety, n = take("<IQ")
            if ety == 8:
                arr = [take_str() for _ in range(n)]
                tokens = arr if key == "tokenizer.ggml.tokens" else tokens
            else:
                pos += sizes[ety] * n
        else:
            pos += sizes[ty]
    infos = []
    for _ in range(n_t):
        name = take_str()
        (nd,) = take("<I")
        infos.append((name, list(take("<%dQ" % nd))) + take("<IQ"))
    data_start = pos + (-pos) % 32
    out = {}
    for name, ne, ty, off in infos:
        n = int(np.prod(ne))
        nbytes = n * 4 if ty == GGML_F32 else n // 32 * 34
        out[name] = (ty, ne, buf[data_start + off:data_start + off + nbytes])
    return tokens, out


def export(model, cfg, tok, path, name):
    """Writes the GGUF; returns a float32 model holding exactly the dequantized exported weights."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    deq_model = Llama(cfg)
    deq_sd = {}
    tensors = []

    def q8(gguf_name, key):
        data, deq = quantize_q8_0(sd[key])
        deq_sd[key] = torch.from_numpy(deq)
        rows, cols = sd[key].shape
        tensors.append((gguf_name, GGML_Q8_0, [cols, rows], data))

    def f32(gguf_name, key):
        a = np.ascontiguousarray(sd[key], dtype="<f4")
        deq_sd[key] = torch.from_numpy(a.copy())
        tensors.append((gguf_name, GGML_F32, [a.shape[0]], a.tobytes()))

    q8("token_embd.weight", "tok.weight")
    for i in range(cfg.n_layers):
        p = "blocks.%d." % i
        f32("blk.%d.attn_norm.weight" % i, p + "attn_norm.weight")
        q8("blk.%d.attn_q.weight" % i, p + "wq.weight")
        q8("blk.%d.attn_k.weight" % i, p + "wk.weight")
        q8("blk.%d.attn_v.weight" % i, p + "wv.weight")
        q8("blk.%d.attn_output.weight" % i, p + "wo.weight")
        f32("blk.%d.ffn_norm.weight" % i, p + "ffn_norm.weight")
        q8("blk.%d.ffn_gate.weight" % i, p + "w_gate.weight")
        q8("blk.%d.ffn_up.weight" % i, p + "w_up.weight")
        q8("blk.%d.ffn_down.weight" % i, p + "w_down.weight")
    f32("output_norm.weight", "norm.weight")
    # Tied: no output.weight, so logits use token_embd.weight (llama.cpp's rule).

    kvs = [
        ("general.architecture", "str", "llama"),
        ("general.name", "str", name),
        ("general.description", "str",
         "Demo model trained on tinyshakespeare by tools/train_demo_model.py"),
        ("general.file_type", "u32", 7),  # LLAMA_FTYPE_MOSTLY_Q8_0
        ("general.alignment", "u32", 32),
        ("llama.context_length", "u32", cfg.ctx),
        ("llama.embedding_length", "u32", cfg.dim),
        ("llama.block_count", "u32", cfg.n_layers),
        ("llama.feed_forward_length", "u32", cfg.ffn_dim),
        ("llama.attention.head_count", "u32", cfg.n_heads),
        ("llama.attention.head_count_kv", "u32", cfg.n_kv_heads),
        ("llama.rope.freq_base", "f32", cfg.rope_base),
        ("llama.rope.dimension_count", "u32", cfg.head_dim),
        ("llama.attention.layer_norm_rms_epsilon", "f32", cfg.norm_eps),
        ("llama.vocab_size", "u32", cfg.vocab_size),
        ("tokenizer.ggml.model", "str", "llama"),
        ("tokenizer.ggml.pre", "str", "default"),
        ("tokenizer.ggml.tokens", "str[]", tok.tokens),
        ("tokenizer.ggml.scores", "f32[]", tok.scores),
        ("tokenizer.ggml.token_type", "i32[]", tok.types),
        ("tokenizer.ggml.bos_token_id", "u32", BOS),
        ("tokenizer.ggml.eos_token_id", "u32", EOS),
        ("tokenizer.ggml.unknown_token_id", "u32", UNK),
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", False),
        ("tokenizer.ggml.add_space_prefix", "bool", False),
    ]
    size = write_gguf(path, kvs, tensors)

    # Verify the file round-trips to the same bytes before trusting any number computed below.
    back_tokens, back = read_gguf_tensors(path)
    assert back_tokens == tok.tokens
    for nm, ty, ne, data in tensors:
        assert back[nm][0] == ty and back[nm][1] == ne and back[nm][2] == data, nm

    deq_model.load_state_dict(deq_sd)
    deq_model.eval()
    return deq_model, size


# ======== Data, evaluation, sampling ========


def fnv1a64(ids):
    """FNV-1a 64 over the ids as little-endian int32 bytes."""
    h = 0xCBF29CE484222325
    for b in np.asarray(ids, dtype="<i4").tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def line_starts(ids):
    nl = BYTE_BASE + 10
    return np.nonzero(ids[:-1] == nl)[0] + 1


def get_batch(ids, starts, batch, t, rng):
    # Every window starts at a line start and is preceded by BOS, the way a prompt is fed.
    s = starts[rng.integers(0, len(starts), batch)]
    s = np.minimum(s, len(ids) - t)
    x = np.empty((batch, t), dtype=np.int64)
    x[:, 0] = BOS
    for i, p in enumerate(s):
        x[i, 1:] = ids[p:p + t - 1]
    y = np.empty_like(x)
    y[:, :-1] = x[:, 1:]
    y[:, -1] = -1
    for i, p in enumerate(s):
        y[i, -1] = ids[p + t - 1] if p + t - 1 < len(ids) else -1
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, ids, t):
    """Mean nats/token over the whole held-out split: non-overlapping segments of t tokens, each
    fed as [BOS] + segment[:-1] so every held-out token is predicted exactly once."""
    model.eval()
    tot, n = 0.0, 0
    segs = [ids[p:p + t] for p in range(0, len(ids), t)]
    for seg in segs:
        y = torch.as_tensor(np.asarray(seg, dtype=np.int64))[None]
        x = torch.cat([torch.tensor([[BOS]]), y[:, :-1]], dim=1)
        logits = model(x)
        tot += F.cross_entropy(logits[0].double(), y[0], reduction="sum").item()
        n += y.shape[1]
    model.train()
    return tot / n


@torch.no_grad()
def passage_loss(model, ids):
    """ids include the leading BOS; mean nats/token predicting ids[1..n-1] from their prefix."""
    model.eval()
    x = torch.tensor(ids, dtype=torch.int64)[None]
    logits = model(x[:, :-1]).double()
    return F.cross_entropy(logits[0], x[0, 1:], reduction="mean").item()


@torch.no_grad()
def generate(model, prompt_ids, n, temperature=0.0, seed=0):
    model.eval()
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt_ids)
    for _ in range(n):
        ctx = torch.tensor(ids[-model.cfg.ctx:], dtype=torch.int64)[None]
        logits = model(ctx)[0, -1]
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            p = torch.softmax(logits / temperature, dim=-1)
            nxt = int(torch.multinomial(p, 1, generator=g))
        if nxt == EOS:
            break
        ids.append(nxt)
    return ids


# ======== Main ========


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data/tinyshakespeare.txt")
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--work-dir", default="/tmp/uf_demo_train", help="checkpoints, token cache")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3000, help="step budget (cosine over steps)")
    ap.add_argument("--minutes", type=float, default=0,
                    help="wall-clock training budget instead of --steps: the cosine schedule "
                         "runs over elapsed time, so a shared, busy machine still finishes")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2,
                    help="max threads. Training starts on 1 thread; every 50 steps 5 steps run "
                         "with the other of {1, max} and the faster is kept: on a busy shared "
                         "machine an OpenMP team of 2 can be several times slower than 1 thread")
    ap.add_argument("--eval-tokens", type=int, default=8192,
                    help="held-out tokens scored at periodic evals (the final eval uses all)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="with --export-only: skip the whole-split evaluation and the samples "
                         "(a fast smoke test of the export; not for the shipped files)")
    ap.add_argument("--passage-tokens", type=int, default=256)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.work_dir, exist_ok=True)
    os.makedirs(args.out_dir, exist_ok=True)

    text = open(args.data, encoding="utf-8").read()
    # Held-out split: the last 10% of the text, cut at a blank line (between speeches).
    split = text.index("\n\n", int(len(text) * 0.9)) + 2
    train_text, held_text = text[:split], text[split:]

    t0 = time.time()
    tokens, scores, types = build_vocab(train_text, args.vocab)
    tok = SpmTokenizer(tokens, scores, types)
    train_ids = np.array(tok.encode(train_text), dtype=np.int64)
    held_ids = np.array(tok.encode(held_text), dtype=np.int64)
    print("tokenizer: %d tokens, train %d tokens (%.3f chars/token), held-out %d tokens "
          "(%.3f chars/token), %.1fs" % (len(tokens), len(train_ids), len(train_text) /
                                        len(train_ids), len(held_ids), len(held_text) /
                                        len(held_ids), time.time() - t0), flush=True)
    assert tok.decode(train_ids.tolist()) == train_text

    cfg = Config(vocab_size=len(tokens), dim=args.dim, n_layers=args.layers, n_heads=args.heads,
                 n_kv_heads=args.kv_heads, ffn_dim=args.ffn, ctx=args.ctx,
                 dropout=args.dropout)
    model = Llama(cfg)
    print("model: %d params (%d non-embedding)" %
          (n_params(model), n_params(model) - model.tok.weight.numel()), flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    ckpt_path = os.path.join(args.work_dir, "ckpt.pt")
    step, train_seconds, log = 0, 0.0, []
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        shape_keys = ("vocab", "dim", "layers", "heads", "kv_heads", "ffn", "ctx", "seed")
        if any(ck["args"][k] != getattr(args, k) for k in shape_keys):
            sys.exit("checkpoint %s was made with other settings; delete it to start over" %
                     ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, train_seconds, log = ck["step"], ck["train_seconds"], ck["log"]
        print("resumed from step %d (%.0fs trained)" % (step, train_seconds), flush=True)

    starts = line_starts(train_ids)
    rng = np.random.default_rng(args.seed + step)

    budget_s = args.minutes * 60

    def progress():
        if budget_s > 0:
            return min(1.0, train_seconds / budget_s)
        return min(1.0, step / args.steps)

    def lr_at(s):
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        frac = progress()
        return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * frac))

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "train_seconds": train_seconds, "log": log, "args": vars(args)},
                   ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    model.train()
    t_last = time.time()
    run_loss = None
    def done():
        return progress() >= 1.0

    threads = 1
    step_time = {}  # threads -> recent seconds/step

    while not done() and not args.export_only:
        other = 1 if threads > 1 else args.threads
        trial = args.threads > 1 and step % 50 < 5 and step >= 10
        torch.set_num_threads(other if trial else threads)
        t_step = time.time()
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step)
        x, y = get_batch(train_ids, starts, args.batch, args.ctx, rng)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), y.view(-1), ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        now = time.time()
        used = other if trial else threads
        step_time[used] = 0.8 * step_time.get(used, now - t_step) + 0.2 * (now - t_step)
        if trial and step % 50 == 5 and step_time[other] < 0.9 * step_time[threads]:
            print("switching to %d thread(s): %.2fs vs %.2fs per step" %
                  (other, step_time[other], step_time[threads]), flush=True)
            threads = other
        train_seconds += now - t_last
        t_last = now
        run_loss = loss.item() if run_loss is None else 0.95 * run_loss + 0.05 * loss.item()
        if step % 25 == 0:
            print("step %d lr %.2e loss %.4f (avg %.4f) %.0fs %.0f tok/s" %
                  (step, lr_at(step - 1), loss.item(), run_loss, train_seconds,
                   step * args.batch * args.ctx / max(train_seconds, 1e-9)), flush=True)
        if step % args.eval_every == 0 or done():
            te = time.time()
            hl = heldout_loss(model, held_ids[:args.eval_tokens], args.ctx)
            log.append({"step": step, "train_loss_avg": run_loss, "heldout_loss": hl,
                        "train_seconds": round(train_seconds, 1)})
            print("EVAL step %d held-out[:%d] %.4f nats/token  [eval %.0fs]" %
                  (step, args.eval_tokens, hl, time.time() - te), flush=True)
            t_last = time.time()
        if step % args.ckpt_every == 0 or done():
            save()
            t_last = time.time()

    # ---- export and evaluate with the dequantized exported weights ----
    gguf_path = os.path.join(args.out_dir, "demo.gguf")
    deq, size = export(model, cfg, tok, gguf_path, "ultrafast-demo-shakespeare")
    print("wrote %s: %d bytes" % (gguf_path, size), flush=True)
    eval_ids = held_ids[:args.ctx] if args.quick else held_ids
    hl = heldout_loss(deq, eval_ids, args.ctx)
    hl_float = heldout_loss(model, eval_ids, args.ctx)
    bpc = hl * len(held_ids) / len(held_text) / math.log(2)
    print("held-out (dequantized Q8_0): %.4f nats/token, %.4f bits/char; float model %.4f" %
          (hl, bpc, hl_float), flush=True)

    # Fixed passage: whole lines from the held-out split starting at a speaker line, at most
    # passage_tokens ids including BOS, so the text re-tokenizes to exactly these ids.
    start = held_text.index("\n\n", 2000) + 2
    lines = held_text[start:].split("\n")
    passage = ""
    for ln in lines:
        cand = passage + ln + "\n"
        if len(tok.encode(cand, add_bos=True)) > args.passage_tokens:
            break
        passage = cand
    pids = tok.encode(passage, add_bos=True)
    assert tok.decode(pids[1:]) == passage
    pl = passage_loss(deq, pids)
    print("passage: %d ids, loss %.6f nats/token" % (len(pids), pl), flush=True)

    prompt = "ROMEO:"
    n_greedy, n_sampled = (10, 10) if args.quick else (100, 150)
    greedy = tok.decode(generate(deq, tok.encode(prompt, add_bos=True), n_greedy)[1:])
    sampled = tok.decode(generate(deq, tok.encode(prompt, add_bos=True), n_sampled, 0.8,
                                  seed=1)[1:])
    print("--- greedy ---\n" + greedy + "\n--- sampled (T=0.8) ---\n" + sampled, flush=True)

    corpus_ids = tok.encode(text)
    eval_json = {
        "model": "models/demo.gguf",
        "text": passage,
        "token_ids": pids,
        "bos_prepended": True,
        "n_tokens": len(pids),
        "n_predicted": len(pids) - 1,
        "mean_nats_per_token": pl,
        "definition": "ids = tokenizer(text) with add_bos_token (ids[0] is BOS, no EOS); "
                      "loss = mean over i in 1..n-1 of -log softmax(logits at position i-1)"
                      "[ids[i]], one forward pass over ids[0..n-2], float32 compute with the "
                      "dequantized weights of models/demo.gguf",
        "heldout_split_nats_per_token": hl,
        "heldout_split_bits_per_char": bpc,
        "greedy_from_ROMEO": greedy,
        # The whole training text tokenized without BOS, so an engine can check that it
        # reproduces the training tokenization everywhere, not only on the passage.
        "corpus": {"path": args.data, "n_bytes": len(text.encode()),
                   "n_tokens": len(corpus_ids), "ids_fnv1a64": "%016x" % fnv1a64(corpus_ids)},
    }
    with open(os.path.join(args.out_dir, "demo_eval.json"), "w") as f:
        json.dump(eval_json, f, indent=1)
        f.write("\n")
    summary = {"params": n_params(model), "file_bytes": size, "steps": step,
               "tokens_seen": step * args.batch * args.ctx, "train_seconds": train_seconds,
               "heldout_nats_per_token": hl, "heldout_bits_per_char": bpc,
               "heldout_float_nats_per_token": hl_float, "train_tokens": len(train_ids),
               "heldout_tokens": len(held_ids), "log": log, "sample_greedy": greedy,
               "sample_t08": sampled, "args": vars(args)}
    with open(os.path.join(args.work_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
