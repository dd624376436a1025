import torch


def two_heads():
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"body": torch.nn.Linear(2, 2), "head": torch.nn.Linear(2, 1), "spare": torch.nn.Linear(2, 1)})
    hidden = model["body"](torch.ones(1, 2)).detach()
    return model["head"](hidden).sum(), model
