"""A small conv net (conv 3x3 x8, relu, conv 3x3 x8 stride 1, relu, linear) trained on digits by compiled Adam steps."""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import anedvd.forge as af

BATCH, EPOCHS, SEED = 32, 8, 0


def main():
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = np.eye(10, dtype=np.float32)[d.target]
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=d.target)
    rng = np.random.default_rng(SEED)
    k1 = af.param(rng.normal(0, np.sqrt(2 / 9), (8, 1, 3, 3)), name="k1")
    k2 = af.param(rng.normal(0, np.sqrt(2 / 72), (8, 8, 3, 3)), name="k2")
    w = af.param(rng.normal(0, np.sqrt(1 / 512), (512, 10)), name="w")
    b = af.param(np.zeros(10), name="b")

    def logits(inp):
        n = inp.shape[0]
        h = inp.conv2d(k1, padding=(1, 1, 1, 1)).relu()
        h = h.conv2d(k2, padding=(1, 1, 1, 1)).relu()
        return h.reshape(n, 512) @ w + b

    xin, t = af.input((BATCH, 1, 8, 8), name="x"), af.input((BATCH, 10), name="t")
    trainer = af.Trainer(logits(xin).cross_entropy(t), optimizer="adam", lr=3e-3)
    print("step program: %d dispatch, %d MIL statements, run by %s" % trainer.program)
    for epoch in range(EPOCHS):
        order = np.random.default_rng(SEED + epoch).permutation(len(xtr))
        losses = [trainer.step(x=xtr[order[i:i + BATCH]], t=ytr[order[i:i + BATCH]])
                  for i in range(0, len(order) - BATCH + 1, BATCH)]
        print(f"epoch {epoch}: mean loss {np.mean(losses):.3f}")
    xt = af.input(xte.shape, name="x_test")
    acc = float(np.mean(trainer.run(logits(xt), x_test=xte).argmax(1) == yte.argmax(1)))
    print(f"test accuracy {acc:.4f} after {trainer.steps} Adam steps")
    assert acc > 0.9


if __name__ == "__main__":
    main()
