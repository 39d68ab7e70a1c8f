"""A GPT-2 reference in PyTorch, written independently of Triad, for the numerical tests
and the CPU benchmark. Weights use Triad's names with nn.Linear's (out, in) layout; a
Hugging Face GPT-2 folder (Conv1D (in, out) layout) can be loaded too."""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32}


def read_safetensors(path):
    """Minimal safetensors reader (json header + raw little-endian data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[base + b:base + e], dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


class GPT(torch.nn.Module):
    def __init__(self, L, C, H, V, max_t, rope=False, rope_base=10000.0, eps=1e-5):
        super().__init__()
        self.L, self.C, self.H, self.V = L, C, H, V
        self.rope, self.rope_base, self.eps = rope, rope_base, eps
        self.wte = torch.nn.Parameter(torch.zeros(V, C))
        self.wpe = None if rope else torch.nn.Parameter(torch.zeros(max_t, C))
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln_1 = torch.nn.LayerNorm(C, eps=eps)
            b.c_attn = torch.nn.Linear(C, 3 * C)
            b.attn_proj = torch.nn.Linear(C, C)
            b.ln_2 = torch.nn.LayerNorm(C, eps=eps)
            b.c_fc = torch.nn.Linear(C, 4 * C)
            b.mlp_proj = torch.nn.Linear(4 * C, C)
            self.blocks.append(b)
        self.ln_f = torch.nn.LayerNorm(C, eps=eps)

    def named_triad_params(self):
        """(triad name, parameter) pairs in Triad's layout order."""
        out = [("wte.weight", self.wte)]
        if self.wpe is not None:
            out.append(("wpe.weight", self.wpe))
        for l, b in enumerate(self.blocks):
            h = f"h.{l}."
            out += [(h + "ln_1.weight", b.ln_1.weight), (h + "ln_1.bias", b.ln_1.bias),
                    (h + "attn.c_attn.weight", b.c_attn.weight), (h + "attn.c_attn.bias", b.c_attn.bias),
                    (h + "attn.c_proj.weight", b.attn_proj.weight), (h + "attn.c_proj.bias", b.attn_proj.bias),
                    (h + "ln_2.weight", b.ln_2.weight), (h + "ln_2.bias", b.ln_2.bias),
                    (h + "mlp.c_fc.weight", b.c_fc.weight), (h + "mlp.c_fc.bias", b.c_fc.bias),
                    (h + "mlp.c_proj.weight", b.mlp_proj.weight), (h + "mlp.c_proj.bias", b.mlp_proj.bias)]
        out += [("ln_f.weight", self.ln_f.weight), ("ln_f.bias", self.ln_f.bias)]
        return out

    def load_triad(self, tensors):
        with torch.no_grad():
            for name, p in self.named_triad_params():
                p.copy_(torch.from_numpy(tensors[name]).to(p.dtype))

    def load_hf(self, folder):
        """Loads a Hugging Face GPT-2 folder (model.safetensors, Conv1D weights (in, out))."""
        t = read_safetensors(os.path.join(folder, "model.safetensors"))
        conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        mapped = {}
        for name, _ in self.named_triad_params():
            key = "transformer." + name if "transformer." + name in t else name
            arr = t[key]
            mapped[name] = arr.T.copy() if name.endswith(conv1d) else arr
        self.load_triad(mapped)

    def _rope(self, x):  # x (B, H, T, D), rotate-half form
        B, H, T, D = x.shape
        i = torch.arange(D // 2, dtype=torch.float64)
        theta = self.rope_base ** (-2.0 * i / D)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, idx, targets):
        B, T = idx.shape
        C, H = self.C, self.H
        D = C // H
        x = self.wte[idx]
        if self.wpe is not None:
            x = x + self.wpe[:T][None]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for b in self.blocks:
            qkv = b.c_attn(b.ln_1(x))
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, H, D).transpose(1, 2)
            k = k.view(B, T, H, D).transpose(1, 2)
            v = v.view(B, T, H, D).transpose(1, 2)
            if self.rope:
                q, k = self._rope(q), self._rope(k)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + b.attn_proj(y)
            x = x + b.mlp_proj(F.gelu(b.c_fc(b.ln_2(x)), approximate="tanh"))
        logits = self.ln_f(x) @ self.wte.T
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def from_result(result, dtype=torch.float64):
    m = GPT(result["num_layers"], result["hidden_size"], result["num_attention_heads"],
            result["vocab_size"], result["seq_length"], rope=result["position_embedding"] == "rope",
            rope_base=result.get("rope_base", 10000.0), eps=result.get("layernorm_epsilon", 1e-5))
    return m.to(dtype)
