"""Train a 64-32-10 MLP on scikit-learn's digits through compiled training steps.

Every step (forward, softmax cross-entropy, backward, SGD-with-momentum
update) is one program on anedvd's fp16 simulator. The same topology,
initial weights, batches and schedule are trained in float64 numpy; the
test accuracies must agree within 2 points.
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import anedvd.forge as af

BATCH, HIDDEN, EPOCHS, LR, MOMENTUM, SEED = 32, 32, 20, 0.1, 0.9, 0


def data():
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[d.target]
    return train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=d.target)


def init(rng):
    w1 = rng.normal(0, np.sqrt(2 / 64), (64, HIDDEN)).astype(np.float32)
    w2 = rng.normal(0, np.sqrt(1 / HIDDEN), (HIDDEN, 10)).astype(np.float32)
    return w1, np.zeros(HIDDEN, np.float32), w2, np.zeros(10, np.float32)


def batches(n, epoch):
    order = np.random.default_rng(SEED + epoch).permutation(n)
    return [order[i:i + BATCH] for i in range(0, n - BATCH + 1, BATCH)]


def train_numpy(xtr, ytr, params):
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    vel = [np.zeros_like(p) for p in (w1, b1, w2, b2)]
    for epoch in range(EPOCHS):
        for idx in batches(len(xtr), epoch):
            x, t = xtr[idx].astype(np.float64), ytr[idx].astype(np.float64)
            h_pre = x @ w1 + b1
            h = np.maximum(h_pre, 0)
            z = h @ w2 + b2
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            dz = (p - t) / len(x)
            dw2, db2 = h.T @ dz, dz.sum(0)
            dh = dz @ w2.T * (h_pre > 0)
            dw1, db1 = x.T @ dh, dh.sum(0)
            for i, (p_, g) in enumerate(zip((w1, b1, w2, b2), (dw1, db1, dw2, db2))):
                vel[i] = MOMENTUM * vel[i] + g
                p_ -= LR * vel[i]
    return w1, b1, w2, b2


def accuracy_numpy(params, x, y):
    w1, b1, w2, b2 = params
    z = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    return float(np.mean(z.argmax(1) == y.argmax(1)))


def main():
    xtr, xte, ytr, yte = data()
    params = init(np.random.default_rng(SEED))

    x = af.input((BATCH, 64), name="x")
    t = af.input((BATCH, 10), name="t")
    w1, b1, w2, b2 = (af.param(p, name=n) for p, n in zip(params, ("w1", "b1", "w2", "b2")))

    def logits(inp):
        return (inp @ w1 + b1).relu() @ w2 + b2

    loss = logits(x).cross_entropy(t)
    trainer = af.Trainer(loss, optimizer="sgd", lr=LR, momentum=MOMENTUM)
    dispatches, statements, unit = trainer.program
    print(f"step program: {dispatches} dispatch, {statements} MIL statements, run by {unit}")

    first = last = None
    for epoch in range(EPOCHS):
        losses = [trainer.step(x=xtr[idx], t=ytr[idx]) for idx in batches(len(xtr), epoch)]
        first = first if first is not None else losses[0]
        last = float(np.mean(losses))
    x_test = af.input(xte.shape, name="x_test")
    z = trainer.run(logits(x_test), x_test=xte)
    acc_forge = float(np.mean(z.argmax(1) == yte.argmax(1)))

    ref = train_numpy(xtr, ytr, params)
    acc_numpy = accuracy_numpy(ref, xte.astype(np.float64), yte)
    print(f"schedule: {EPOCHS} epochs, batch {BATCH}, SGD lr {LR} momentum {MOMENTUM}, "
          f"{trainer.steps} steps; loss {first:.3f} -> {last:.3f}")
    print(f"test accuracy: forge (fp16 simulator) {acc_forge:.4f}, numpy float64 {acc_numpy:.4f}")
    assert abs(acc_forge - acc_numpy) <= 0.02, "accuracies differ by more than 2 points"
    assert acc_forge > 0.9


if __name__ == "__main__":
    main()
