"""Server mode: ``VLLMBackend(vllm_mode="server")`` against a real vLLM OpenAI-compatible server on 127.0.0.1
(``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` and ``--logprobs-mode processed_logprobs``, as ``trl
vllm-serve`` starts it), through TRL's ``VLLMClient``: greedy completions equal HF's, the log-probs are the
policy's own, and a weight update reaches the server by file sync (``vllm_weight_sync="file"``, the path a
server on the same machine takes without NCCL) before the next generate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
from comlrl.rollout.vllm import VLLMBackend
from comlrl.scoring import completion_logprobs
from tests.helpers.two_ranks import free_port

pytestmark = pytest.mark.vllm

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def server(tiny_model_path, tmp_path_factory):
    """A vLLM server on test-tiny; yields its URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # The module entry point, not `vllm serve`: the CLI reads the version of a distribution named `vllm`, and the
    # CPU build is distributed as `vllm-cpu`.
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny_model_path, "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
               "--logprobs-mode", "processed_logprobs", "--seed", "0"]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                pytest.fail(f"the vLLM server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server did not come up in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_server_mode_generates_as_hf_and_takes_weight_updates_by_file(server, tiny_model_path, tmp_path):
    policy = MultiAgentPolicy.single(tiny_model_path, ["default"])
    batch = [GenerationRequest(f"Server prompt {i}", seed=i) for i in range(4)]
    with VLLMBackend(policy, vllm_mode="server", vllm_server_base_url=server, vllm_weight_sync="file",
                     vllm_sync_dir=str(tmp_path / "sync")) as backend:
        ours = backend.generate(batch, GREEDY)
        theirs = HFBackend(policy).generate(batch, GREEDY)
        assert [o[0].token_ids for o in ours] == [t[0].token_ids for t in theirs]
        assert [o[0].text for o in ours] == [t[0].text for t in theirs]
        sampled = backend.generate(batch, SamplingParams(temperature=0.8, max_new_tokens=12, n=2))
        model = policy.handle("default").model
        for completion in [c for g in sampled for c in g]:
            values, mask = completion_logprobs(model, [completion.prompt_token_ids], [completion.token_ids],
                                               pad_token_id=0, temperature=0.8)
            assert torch.allclose(torch.tensor(completion.logprobs), values[0][mask[0]], atol=2e-4)
        again = backend.generate(batch, SamplingParams(temperature=0.8, max_new_tokens=12, n=2))
        assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in sampled]  # seeded
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
        policy.bump_version("default")
        updated = backend.generate(batch, GREEDY)
        assert backend.weight_syncs >= 1
        assert [o[0].token_ids for o in updated] == [t[0].token_ids for t in HFBackend(policy).generate(batch, GREEDY)]
        assert [o[0].token_ids for o in updated] != [o[0].token_ids for o in ours]
        assert {o[0].policy_version for o in updated} == {1}
        assert not any((tmp_path / "sync").glob("model-*"))  # each synced folder is removed once loaded
