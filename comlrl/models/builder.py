"""Small causal LMs built offline: a byte-level BPE tokenizer trained on the shipped corpus and a
randomly initialised Qwen2 model, written as a standard checkpoint folder.

The folder loads with plain ``AutoModelForCausalLM.from_pretrained(path)`` and
``AutoTokenizer.from_pretrained(path)``. Builds are deterministic from (preset, seed) and cached under
a key that also hashes this file and the corpus, so a changed builder never serves a stale model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.txt")

# Special tokens: the chat markers of ChatML plus a dedicated pad token (pad != eos, so trainers can
# tell a sampled EOS from padding).
BOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [BOS_TOKEN, IM_START, IM_END, PAD_TOKEN]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Architecture of a built model (a Qwen2 decoder). head_dim = hidden_size / num_attention_heads
    stays >= 32 so vLLM's CPU and GPU attention kernels accept it too."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


BUILT_PRESETS: dict[str, TinyModelSpec] = {
    # ~0.1 M parameters: unit tests.
    "test-tiny": TinyModelSpec(512, 64, 128, 2, 2, 1),
    # ~0.5 M parameters: integration tests and quick demos.
    "tiny": TinyModelSpec(1024, 128, 256, 2, 4, 2),
    # ~4 M parameters: the default model of the example runs and benchmarks.
    "small": TinyModelSpec(2048, 256, 768, 4, 8, 4),
}


def default_cache_dir() -> Path:
    """``$COMLRL_MODEL_CACHE`` if set, else ``$XDG_CACHE_HOME/comlrl/models`` (``~/.cache/...``)."""
    if os.environ.get("COMLRL_MODEL_CACHE"):
        return Path(os.environ["COMLRL_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "comlrl" / "models"


def builder_fingerprint(spec: TinyModelSpec) -> str:
    """Hash of this builder's code, the corpus and the spec: part of every cache key."""
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    digest.update(CORPUS_PATH.read_bytes())
    digest.update(repr(sorted(asdict(spec).items())).encode())
    return digest.hexdigest()[:12]


def train_tokenizer(vocab_size: int):
    """Byte-level BPE trained on the shipped corpus; any text round-trips through it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    tokenizer.train_from_iterator(lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model_folder(spec: TinyModelSpec, seed: int, out_dir: str | os.PathLike) -> Path:
    """Write tokenizer + randomly initialised Qwen2 weights for ``spec`` into ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = train_tokenizer(spec.vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    # Model init draws from torch's global generator; fork it so building never disturbs the caller.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def cached_build(key: str, cache_dir: str | os.PathLike | None, build) -> Path:
    """Return ``cache_dir/key``, building it with ``build(tmp_dir)`` first if absent.

    The folder appears atomically (built in a temporary sibling, then renamed), and a lock file beside it
    (``.{key}.lock``) makes a second process that wants the same model wait for the first's build instead of
    building it again (where the lock cannot be taken, e.g. a read-only folder, the build goes on without it:
    the first rename wins and the other copy is discarded). A build (seconds for the built presets, about a
    minute for a conversion) says on stderr what it builds, where, and how long it took, since it happens
    once per machine, before any progress bar of the run.
    """
    from filelock import FileLock, Timeout

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / key
    if (final / "config.json").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(root / f".{key}.lock"))
    try:
        lock.acquire(timeout=1800)
    except (OSError, Timeout):
        return _build_into(root, key, final, build)
    try:
        if (final / "config.json").exists():  # built by the process that held the lock
            return final
        return _build_into(root, key, final, build)
    finally:
        lock.release()


def _build_into(root: Path, key: str, final: Path, build) -> Path:
    """Build ``key`` in a temporary sibling of ``final`` and rename it into place (the first rename wins)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    print(f"model {key}: building it into {root} (first use only) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        build(tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"model {key}: built in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return final


def build_tiny(preset: str, seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Build (or fetch from the cache) one of :data:`BUILT_PRESETS`."""
    spec = BUILT_PRESETS[preset]
    key = f"{preset}-seed{seed}-{builder_fingerprint(spec)}"
    return cached_build(key, cache_dir, lambda tmp: build_model_folder(spec, seed, tmp))
