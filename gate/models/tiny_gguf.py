"""A tiny Llama model written as a GGUF file from a seed, so a real engine can serve it with no hub.

Float32 weights from a seeded normal for a small Llama (2 layers, 2 query heads of 32 dimensions
over one key/value head, 512 tokens; 32 is the block size of llama.cpp's quantised KV types) and a
SentencePiece-style tokenizer llama.cpp accepts (gate sends token ids, so it only has to load).
The scales give the logits a real spread, so comparisons are not near-ties. `sliding_window`
makes the file a `gemma2` one (llama.cpp's architecture with local layers): the same seeded draws
plus gemma2's post norms, tied output, GELU feed-forward and logit soft-capping.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

N_CONTROL = 3
"""<unk>, <s>, </s>"""
N_BYTES = 128
"""Byte-fallback tokens for ASCII only: a generated token is then always whole UTF-8, so the server
never holds a token back waiting for the rest of a character (which would shift its logprobs)."""


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Shape and seed of the model; the file is a pure function of these fields."""

    seed: int = 0
    vocab_size: int = 512
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_head_kv: int = 1
    n_ff: int = 128
    context_length: int = 8192
    rope_freq_base: float = 10000.0
    perturb_seed: int | None = None
    """When set, every weight moves by a seeded perturbation of relative size `perturb_scale`."""
    perturb_scale: float = 0.05
    sliding_window: int | None = None
    """Tokens each local layer attends to (itself included); None: every layer is global. The GGUF
    writer then writes a gemma2 model (llama.cpp's llama architecture has no local layers); the
    Hugging Face writer a Llama with per-layer `layer_types`."""
    sliding_layers: tuple[int, ...] | None = None
    """Which layers are local when `sliding_window` is set; None: all of them."""

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def gguf_architecture(self) -> str:
        """The llama.cpp architecture of the GGUF file: gemma2 where there are local layers, else llama."""
        return "llama" if self.sliding_window is None else "gemma2"

    def local_layers(self) -> tuple[int, ...]:
        if self.sliding_window is None:
            return ()
        return tuple(range(self.n_layer)) if self.sliding_layers is None else tuple(sorted(self.sliding_layers))

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError(
                f"n_embd {self.n_embd} must split into n_head {self.n_head} heads, and those into "
                f"n_head_kv {self.n_head_kv} groups"
            )
        if any(not 0 <= i < self.n_layer for i in self.sliding_layers or ()):
            raise ValueError(f"sliding_layers {self.sliding_layers} name layers outside 0..{self.n_layer - 1}")


GEMMA2_EMBEDDING_SCALE = 0.3
"""gemma2 multiplies the (tied) embedding by sqrt(n_embd) = 8 on input: 0.3 keeps the logits' spread
near the llama model's (2.5 / sqrt(n_embd) against normed activations)."""
GEMMA2_POST_NORM = 5.0
"""Scale of gemma2's post-attention and post-feed-forward norm weights: each layer's output then
outweighs the input embedding in the residual stream, which the tied output would read back as the
last input token."""


def tensors_of(spec: TinyLlamaSpec, architecture: str = "llama") -> dict[str, Any]:
    """The seeded weights by GGUF tensor name, numpy float32 (out, in): the llama set, or gemma2's."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    d, ff, head_dim = spec.n_embd, spec.n_ff, spec.n_embd // spec.n_head
    kv = head_dim * spec.n_head_kv

    def normal(shape: tuple[int, ...], scale: float) -> Any:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # numpy shape (out, in): gguf stores it as ggml's ne = [in, out], as llama.cpp expects
    tensors: dict[str, Any] = {"token_embd.weight": normal((spec.vocab_size, d), 1.0)}
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = (1.0 + normal((d,), 0.1)).astype(np.float32)
        tensors[p + "attn_q.weight"] = normal((d, d), 1.5 / d**0.5)
        tensors[p + "attn_k.weight"] = normal((kv, d), 1.5 / d**0.5)
        tensors[p + "attn_v.weight"] = normal((kv, d), 1.0 / d**0.5)
        tensors[p + "attn_output.weight"] = normal((d, d), 1.0 / d**0.5)
        tensors[p + "ffn_norm.weight"] = (1.0 + normal((d,), 0.1)).astype(np.float32)
        tensors[p + "ffn_gate.weight"] = normal((ff, d), 1.0 / d**0.5)
        tensors[p + "ffn_up.weight"] = normal((ff, d), 1.0 / d**0.5)
        tensors[p + "ffn_down.weight"] = normal((d, ff), 1.0 / ff**0.5)
    tensors["output_norm.weight"] = np.ones((d,), dtype=np.float32)
    tensors["output.weight"] = normal((spec.vocab_size, d), 2.5 / d**0.5)
    if architecture == "gemma2":
        del tensors["output.weight"]  # tied: llama.cpp's gemma2 reads token_embd for the output
        tensors["token_embd.weight"] = (tensors["token_embd.weight"] * GEMMA2_EMBEDDING_SCALE).astype(np.float32)
        for i in range(spec.n_layer):
            for norm in ("post_attention_norm", "post_ffw_norm"):
                tensors[f"blk.{i}.{norm}.weight"] = (GEMMA2_POST_NORM * (1.0 + normal((d,), 0.1))).astype(np.float32)
    elif architecture != "llama":
        raise ValueError(f"architecture {architecture!r}: the tiny GGUF is llama or gemma2")
    if spec.perturb_seed is not None:
        prng = np.random.default_rng(spec.perturb_seed)
        for name, value in tensors.items():
            noise = prng.standard_normal(value.shape).astype(np.float32)
            tensors[name] = (value + noise * spec.perturb_scale * float(np.abs(value).mean())).astype(np.float32)
    return tensors


def vocabulary_pieces(vocab_size: int) -> list[str]:
    """The pieces of the vocabulary, by id: control tokens, ASCII byte tokens, plain pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(N_BYTES)]
    plain = vocab_size - len(tokens)
    if plain < 0:
        raise ValueError(f"vocab_size must be at least {len(tokens)} (control and byte tokens)")
    return tokens + [f"\u2581t{i}" for i in range(plain)]


def _vocab(spec: TinyLlamaSpec) -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = vocabulary_pieces(spec.vocab_size)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * N_BYTES
    plain = spec.vocab_size - len(types)
    types += [gguf.TokenType.NORMAL] * plain
    scores = [0.0] * (N_CONTROL + N_BYTES) + [-float(i) for i in range(plain)]
    return tokens, scores, [int(t) for t in types]


def write_tiny_gguf(path: Path, spec: TinyLlamaSpec) -> str:
    """Write the model to `path` (atomically) and return the file's sha256."""
    import gguf

    arch = spec.gguf_architecture()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    name = f"gate-tiny-{arch}-s{spec.seed}" + (f"-p{spec.perturb_seed}" if spec.perturb_seed is not None else "")
    writer.add_name(name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_rope_freq_base(spec.rope_freq_base)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(spec.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if spec.sliding_window is not None:
        local = set(spec.local_layers())
        writer.add_sliding_window(spec.sliding_window)
        writer.add_sliding_window_pattern([i in local for i in range(spec.n_layer)])
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)
    tokens, scores, types = _vocab(spec)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    for tensor_name, value in tensors_of(spec, arch).items():
        writer.add_tensor(tensor_name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()
