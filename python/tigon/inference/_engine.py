"""The inference engine of one model: the static KV cache and step state, the prompt pass (prefill), the decode step
and the host loop that drives it.

Every tensor the decode step touches is allocated here once, at optimize_model time, and updated in place, so the step
has fixed shapes and addresses: on a GPU it is captured into a CUDA graph per batch bucket (and cache length bucket)
and replayed; on the CPU it runs eagerly. The host reads device data only every `check_every` tokens, to see whether
every sequence has stopped; the step itself marks finished sequences and writes padding after their stop token.
"""

from __future__ import annotations

import functools

import torch

from tigon.inference._cache import StaticKVCache
from tigon.inference._decoder import Decoder
from tigon.inference._graphs import StepGraphs
from tigon.inference._ops import _decode_attention, _prefill_attention
from tigon.inference._sampling import Sampling, next_tokens
from tigon.inference._spec import Spec

MAX_STOP_TOKENS = 32  # stop ids are matched against a fixed-size device buffer (unused entries -1)
MIN_CACHE_BUCKET = 128  # the decode step attends over the cache rounded up to a power of two from here
NOT_STOPPED = 2**62


def bucket(n: int, cap: int, floor: int = 1) -> int:
    """The power of two >= max(n, floor), at most cap."""
    return min(cap, max(floor, 1 << (max(n, 1) - 1).bit_length()))


def prompt_mask(t: int, valid: torch.Tensor | None, window: int | None, device) -> torch.Tensor | None:
    """[B or 1, T, T] keys each prompt query may attend (causal, the window, not padding), or None for plain causal
    attention. A padding query attends to itself, so no row is empty (an empty softmax row is NaN)."""
    if valid is None and (window is None or window >= t):
        return None
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None]
    allowed = j <= i
    if window is not None:
        allowed &= j > i - window
    allowed = allowed[None] if valid is None else allowed[None] & valid[:, None, :]
    return allowed | (i == j)


class Engine:
    def __init__(self, spec: Spec, max_batch_size: int, max_seq_len: int, check_every: int = 16) -> None:
        self.spec, self.max_batch_size, self.max_seq_len, self.check_every = (
            spec,
            max_batch_size,
            max_seq_len,
            check_every,
        )
        self.decoder = Decoder(spec, max_seq_len)
        device, b = spec.device, max_batch_size
        self.cache = StaticKVCache(len(spec.layers), b, spec.kv_heads, max_seq_len, spec.head_dim, spec.dtype, device)
        long = dict(dtype=torch.long, device=device)
        self.tokens, self.start = torch.zeros(b, **long), torch.zeros(b, **long)
        self.slot, self.step = torch.zeros(1, **long), torch.zeros(1, **long)
        self.finished = torch.zeros(b, dtype=torch.bool, device=device)
        self.finish_step = torch.zeros(b, **long)
        self.out = torch.zeros(b, max_seq_len, **long)
        self.stop, self.pad = torch.full((MAX_STOP_TOKENS,), -1, **long), torch.zeros(1, **long)
        self.seen = torch.zeros(b, spec.model.config.vocab_size, dtype=torch.bool, device=device)
        self.generator = torch.Generator(device=device)
        self.graphs = StepGraphs(device)

    @property
    def nbytes(self) -> int:
        """Device memory held besides the model: the KV cache and the step state."""
        state = (self.tokens, self.start, self.finished, self.finish_step, self.out, self.seen)
        return self.cache.nbytes + sum(t.numel() * t.element_size() for t in state)

    # ---- the prompt ---------------------------------------------------------------------------------------------

    def _prompt_attention(self, t: int, valid, write_cache: bool, kv: list | None):
        masks = {}
        s = self.spec

        def attend(i, layer, q, k, v):
            if layer.window not in masks:
                masks[layer.window] = prompt_mask(t, valid, layer.window, q.device)
            if write_cache:
                self.cache.write_prompt(i, k, v)
            if kv is not None:
                kv.append((k, v))
            return _prefill_attention(q, k, v, masks[layer.window], s.scale, s.attn_softcap)

        return attend

    def hidden(self, ids, positions, valid=None, write_cache=False, kv=None) -> torch.Tensor:
        """The final-normed hidden states [B, T, hidden] of a prompt (valid [B, T]: False at padding, None: none);
        write_cache fills cache slots [0, T); kv, a list, receives each layer's (k, v)."""
        d = self.decoder
        attend = self._prompt_attention(ids.shape[1], valid, write_cache, kv)
        return d.hidden(d.embed(ids), positions, attend)

    # ---- one token ----------------------------------------------------------------------------------------------

    def _emit(self, rows: int, logits: torch.Tensor, sampling: Sampling) -> None:
        """Chooses each row's next token from [rows, V] fp32 logits and records it: padding after a stop token, the
        step at which a row stops, the token as next step's input."""
        seen, finished = self.seen[:rows], self.finished[:rows]
        token = next_tokens(logits, sampling, seen, self.generator if sampling.do_sample else None)
        token = torch.where(finished, self.pad, token)
        self.out[:rows].index_copy_(1, self.step, token[:, None])
        if sampling.repetition_penalty != 1.0:
            seen.scatter_(1, token[:, None], True)
        stopped = (token[:, None] == self.stop).any(dim=-1) & ~finished
        self.finish_step[:rows].copy_(torch.where(stopped, self.step, self.finish_step[:rows]))
        finished |= stopped
        self.tokens[:rows].copy_(token)
        self.step += 1

    def _decode(self, rows: int, length: int, sampling: Sampling) -> None:
        """The decode step: rows sequences, one token each, through every layer against cache slots [0, length)."""
        s, d = self.spec, self.decoder
        start = self.start[:rows]
        # int32 per row, once per step: what the attention kernel takes, shared by every layer
        lengths, starts = (self.slot + 1).to(torch.int32).expand(rows).contiguous(), start.to(torch.int32)

        def attend(i, layer, q, k, v):
            keys, values = self.cache.write_token(i, self.slot, lengths, k, v, length)
            return _decode_attention(q, keys, values, lengths, starts, s.scale, s.attn_softcap, layer.window)

        h = d.hidden(d.embed(self.tokens[:rows, None]), (self.slot - start)[:, None], attend)
        self._emit(rows, d.logits(h[:, -1]).float(), sampling)
        self.slot += 1

    # ---- the loop -----------------------------------------------------------------------------------------------

    def _reset(self, ids, valid, rows: int, sampling: Sampling, stop: list[int], pad: int) -> torch.Tensor:
        b, t = ids.shape
        start = torch.zeros(b, dtype=torch.long, device=ids.device) if valid is None else t - valid.sum(1)
        self.start[:b].copy_(start)
        self.start[b:rows].fill_(t)  # rows past the batch (up to its bucket) see only their own token
        self.tokens[:rows].fill_(pad)
        self.slot.fill_(t)
        self.step.zero_()
        self.finished[:b].fill_(False)
        self.finished[b:rows].fill_(True)
        self.finish_step.fill_(NOT_STOPPED)
        self.stop.fill_(-1)
        self.stop[: len(stop)].copy_(torch.tensor(stop, dtype=torch.long))
        self.pad.fill_(pad)
        if sampling.repetition_penalty != 1.0:
            self.seen[:rows].zero_()
            self.seen[:b].scatter_(1, ids, True)
        return start

    def _sync(self, b: int, emitted: int, streamed: int, streamer) -> tuple[int | None, int]:
        """The one host read per check: whether every row has stopped (then the number of columns, as transformers
        stops), and the new columns for the streamer."""
        total = None
        if bool(self.finished[:b].all()):
            total = int(self.finish_step[:b].max()) + 1
        end = min(emitted, total or emitted)
        if streamer is not None:
            for column in self.out[:b, streamed:end].cpu().T:
                streamer.put(column)
        return total, end

    @torch.no_grad()
    def generate(self, ids, valid, new_tokens: int, sampling: Sampling, stop: list[int], pad: int, streamer=None):
        """ids [B, T] (left padding where valid [B, T] is False) -> [B, T + n], n <= new_tokens (fewer where every
        row stops early), as transformers' generate returns."""
        b, t = ids.shape
        rows = bucket(b, self.max_batch_size)
        if sampling.do_sample:  # from torch's global RNG: torch.manual_seed makes a run reproducible
            self.generator.manual_seed(int(torch.randint(2**62, (1,))))
        start = self._reset(ids, valid, rows, sampling, stop, pad)
        positions = (torch.arange(t, device=ids.device) - start[:, None]).clamp(min=0)
        h = self.hidden(ids, positions, valid, write_cache=True)
        self._emit(b, self.decoder.logits(h[:, -1]).float(), sampling)
        emitted, streamed, total = 1, 0, None
        while True:
            total, streamed = self._sync(b, emitted, streamed, streamer)
            if total is not None or emitted == new_tokens:
                break
            for _ in range(min(self.check_every, new_tokens - emitted)):
                length = bucket(t + emitted, self.max_seq_len, MIN_CACHE_BUCKET)  # the slot written is t + emitted - 1
                step = functools.partial(self._decode, rows, length, sampling)
                self.graphs.run((rows, length, sampling), step, self.generator if sampling.do_sample else None)
                emitted += 1
        return torch.cat([ids, self.out[:b, : total or emitted]], dim=1)
