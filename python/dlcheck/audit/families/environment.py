"""Environment: the team's own PyTorch against the machine it runs on
(E1-E3). One step of the team's training is recorded, and its trace carries
the recorder's fingerprint of this process: torch.version.cuda, the arch
list the wheel was built for, the GPUs it sees, the cuDNN and NCCL it was
built with and those it loaded. The harness's torch_environment check
judges each ID from it, as `dlcheck env TRACE` does (docs/pitfalls.md). On
a torch without CUDA, or a machine without a driver, there is nothing to
judge: the checks are reported not tested, with the reason."""
from __future__ import annotations

from ..context import Context
from ..declaration import FamilyDeclaration
from ..scenario import Check, Family

DESCRIPTION = ("The team's PyTorch wheel against this machine: its CUDA runtime against the "
               "driver, its arch list against each GPU, its cuDNN and NCCL as built and as loaded.")
ABOUT = {
    "E1": "the CUDA runtime torch bundles is one the driver supports",
    "E2": "torch's arch list has a kernel image for every GPU it sees",
    "E3": "the cuDNN and NCCL torch loaded are those it was built with",
}


def run(ctx: Context) -> Family:
    fam = Family("environment", DESCRIPTION)
    r = ctx.recorded(fam.scenario, "team_step")
    r.train(1)  # the fingerprint is what is judged; one step makes a trace of it
    fam.runs["team_step"] = r.save()
    r.close()
    for cid, about in ABOUT.items():
        fam.checks.append(Check(f"torch_{cid.lower()}", "torch_environment", "team_step",
                                quantities=(cid,), catalogue=(cid,), about=about))
    return fam


FAMILY = FamilyDeclaration("environment", run, tuple(ABOUT), description=DESCRIPTION)
