"""DistillKL distillation (``BiEncoder(loss="distill-kl")``): the loss on hand-made vectors, the
same number as sentence-transformers' ``DistillKLDivLoss`` on the same embeddings and teacher
scores (dot product and cosine, several temperatures, shared or separate for the student and
the teacher), and the GradCache pass giving the one-pass gradients."""

from __future__ import annotations

import math

import pytest
import torch

from bertkit.model.contrastive import BiEncoder, distill_kl_loss
from bertkit.tasks.embedding import EmbeddingAdapter
from support.tiny_encoder import tiny_encoder


def test_the_loss_on_hand_made_vectors() -> None:
    q = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[0.0, 1.0]])
    n = torch.tensor([[[0.0, 1.0]]])  # (N=1, B=1, H=2)
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    # the student scores both candidates 0 (softmax 1/2, 1/2), the teacher's softmax is 3/4, 1/4
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert float(distill_kl_loss(q, p, n, teacher, 1.0)) == pytest.approx(expected, rel=1e-5)
    # T = 2: the teacher's softmax of ln(3) / 2 and 0 is sqrt(3) / (1 + sqrt(3)); times T^2 = 4
    t = math.sqrt(3) / (1 + math.sqrt(3))
    expected = 4 * (t * math.log(t / 0.5) + (1 - t) * math.log((1 - t) / 0.5))
    assert float(distill_kl_loss(q, p, n, teacher, 2.0)) == pytest.approx(expected, rel=1e-5)
    # the teacher at 2, the student at 1: the same KL, times the student's 1^2 only
    separate = distill_kl_loss(q, p, n, teacher, 1.0, teacher_temperature=2.0)
    assert float(separate) == pytest.approx(expected / 4, rel=1e-5)
    # three candidates, two rows: the KL is summed over the candidates, averaged over the rows
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    p = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    n = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, -1.0]]])  # (N=2, B=2, H=2)
    teacher = torch.tensor([[0.9, 0.2, 0.4], [1.0, 0.0, 0.0]])
    students = [[0.5, 0.0, 1.0], [2.0, 0.0, -2.0]]

    def softmax(xs: list[float]) -> list[float]:
        total = sum(math.exp(x) for x in xs)
        return [math.exp(x) / total for x in xs]

    kl = [
        sum(a * math.log(a / b) for a, b in zip(softmax(t), softmax(s), strict=True))
        for t, s in zip(teacher.tolist(), students, strict=True)
    ]
    assert float(distill_kl_loss(q, p, n, teacher, 1.0)) == pytest.approx(sum(kl) / 2, rel=1e-5)


@pytest.mark.parametrize("negatives", [1, 3])
@pytest.mark.parametrize(
    ("temperature", "student", "teacher_t"),
    [
        (1.0, None, None),
        (0.05, None, None),
        (2.0, None, None),
        (1.0, 0.05, 2.0),  # both sides their own
        (1.0, 2.0, 0.5),
        (0.05, None, 1.0),  # the student at the shared temperature, the teacher its own
        (0.5, 3.0, None),
    ],
)
def test_the_same_loss_as_sentence_transformers(
    negatives: int, temperature: float, student: float | None, teacher_t: float | None
) -> None:
    st = pytest.importorskip("sentence_transformers")
    g = torch.Generator().manual_seed(0)
    b, h = 4, 8
    q, p = torch.randn(b, h, generator=g), torch.randn(b, h, generator=g)
    n = torch.randn(negatives, b, h, generator=g)
    teacher = torch.rand(b, 1 + negatives, generator=g)  # sigmoid-like, as mined scores are
    # the temperatures as fine-tuning resolves them (None: the shared --temperature)
    sides = EmbeddingAdapter(
        "embeddings",
        "x",
        loss="distill-kl",
        temperature=temperature,
        student_temperature=student,
        teacher_temperature=teacher_t,
    ).temperatures
    for cosine, fct in ((False, st.util.pairwise_dot_score), (True, st.util.pairwise_cos_sim)):
        reference = st.sentence_transformer.losses.DistillKLDivLoss(
            None,
            similarity_fct=fct,
            temperature=temperature,
            student_temperature=student,
            teacher_temperature=teacher_t,
        ).compute_loss_from_embeddings([q, p, *n], teacher)
        ours = distill_kl_loss(q, p, n, teacher, sides[0], cosine, sides[1])
        assert torch.equal(ours, reference), (cosine, float(ours), float(reference))
        if student is not None or teacher_t is not None:
            # negative control: one shared temperature (either side's) is another loss
            for shared in set(sides):
                other = distill_kl_loss(q, p, n, teacher, shared, cosine)
                assert float(other) != pytest.approx(float(ours), rel=1e-4), shared
    # the softmax ignores a shift of all the teacher's scores; each negative's own score counts
    # (negative control: swapped scores give another loss)
    torch.testing.assert_close(
        distill_kl_loss(q, p, n, teacher + 3.0, temperature),
        distill_kl_loss(q, p, n, teacher, temperature),
    )
    swapped = teacher.flip(1)
    assert float(distill_kl_loss(q, p, n, swapped, temperature)) != pytest.approx(
        float(distill_kl_loss(q, p, n, teacher, temperature))
    )


B, G = 3, 4  # 3 examples of query, positive and two negatives: 12 rows


def _model(
    size: int | None,
    normalize: bool = False,
    temperature: float = 1.0,
    teacher_temperature: float | None = None,
) -> BiEncoder:
    return BiEncoder(
        tiny_encoder(),
        mini_batch_size=size,
        loss="distill-kl",
        cosine=normalize,
        temperature=temperature,
        teacher_temperature=teacher_temperature,
    )


def _step(model: BiEncoder) -> tuple[float, dict]:
    g = torch.Generator().manual_seed(1)
    mask = (torch.arange(10)[None, :] < torch.randint(3, 11, (B * G, 1), generator=g)).long()
    ids = torch.randint(5, 50, (B * G, 10), generator=g) * mask
    teacher = torch.rand(B, G - 1, generator=g) * 5
    out = model(ids, mask, labels=torch.arange(B), teacher_scores=teacher)
    out.loss.backward()
    # the loss is the one of its vectors, laid out query, positive, negative columns
    v = out.embeddings.detach()
    n = v[2 * B :].reshape(G - 2, B, -1)
    direct = distill_kl_loss(
        v[:B],
        v[B : 2 * B],
        n,
        teacher,
        model.temperature,
        model.cosine,
        model.teacher_temperature,
    )
    torch.testing.assert_close(out.loss.detach(), direct)
    return float(out.loss.detach()), {k: p.grad for k, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("normalize", "temperature", "teacher_temperature"),
    [(False, 1.0, None), (True, 0.05, None), (True, 0.05, 2.0)],
)
def test_mini_batches_give_the_one_pass_gradients(
    normalize: bool, temperature: float, teacher_temperature: float | None
) -> None:
    loss, grads = _step(_model(None, normalize, temperature, teacher_temperature))
    cached_loss, cached = _step(_model(5, normalize, temperature, teacher_temperature))
    assert loss > 0
    assert cached_loss == pytest.approx(loss, rel=1e-6)
    for name, grad in grads.items():
        assert grad is not None and cached[name] is not None, name
        scale = max(float(grad.abs().max()), 1.0)
        torch.testing.assert_close(cached[name], grad, rtol=0, atol=2e-6 * scale, msg=name)


def test_no_teacher_scores_is_an_error() -> None:
    model = _model(None)
    ids = torch.ones(B * G, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="distill-kl needs the teacher"):
        model(ids, torch.ones_like(ids), labels=torch.arange(B))
