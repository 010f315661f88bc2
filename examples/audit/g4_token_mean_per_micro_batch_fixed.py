"""g4_token_mean_per_micro_batch.py with its pitfall fixed: the summed token
loss of each micro-batch is divided by the token count of the whole
accumulated batch, so every token counts the same."""
from g4_token_mean_per_micro_batch import (AUDIT, batches, make_model,  # noqa: F401
                                           make_optimizer, token_loss_sum, train)


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    tokens = sum(batch["mask"].sum() for batch in micro_batches)
    for batch in micro_batches:
        total, _ = token_loss_sum(model, batch)
        loss = total / tokens
        loss.backward()
    optimizer.step()
    return loss * len(micro_batches)


if __name__ == "__main__":
    train(train_step)
