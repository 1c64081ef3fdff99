"""The placeholder record of the docs' `evaluators` table, built from one `policy estimate` output.

    python docs/evaluators/from_estimate.py docs/real_trials_demo/estimate.json simforcing-fewstep

The table's record is the demo's evaluators section (results.json "estimate": ``EvaluatorsSection.to_json()``, every
world model of the pool), recorded with ``python -m simforcing.docs_tables --record evaluators runs/demo/results.json
--machine M --commit C``. Until a demo with that section is recorded, this writes the same format from an estimate of
one world model: its raw rates' Pearson with the truth over the pool (no interval; no MMRV), the coverage study at
n = 10 (worst coverage, trials saved, trust AUROC, ρ where it holds them) and the two experts' raw rates inside it.
Its commit, machine and date are the estimate's (docs/records.json).
"""

import json
import sys
from pathlib import Path

from simforcing.demo.estimate_section import CLEAN, NOISIEST, EvaluatorRow, EvaluatorsSection

OUT = Path(__file__).with_name("evaluators.json")
N = 10


def main() -> None:
    src, name = Path(sys.argv[1]), sys.argv[2]
    est = json.loads(src.read_text())
    study = next(s for s in est["study"] if s["n"] == N)
    pol = est["policies"]
    row = EvaluatorRow(name, pearson=study["pearson_world_model"], n=N,
                       coverage=min(c["ppi"] for c in study["coverage"].values()), saved=study["saved"],
                       trust_auroc=study.get("trust_auroc"), rho_verdict=study.get("rho_verdict"),
                       rho_predictor=study.get("rho_predictor"), clean_expert=pol[CLEAN]["average"]["world_model"],
                       noisiest_expert=pol[NOISIEST]["average"]["world_model"], folder=str(src.parent))
    per_task = pol[CLEAN]["average"]["episodes"] // len(pol[CLEAN]["tasks"])
    section = EvaluatorsSection({name: row}, None, per_task, study["draws"])
    OUT.write_text(json.dumps(section.to_json(), indent=1) + "\n")
    print(f"{OUT}: {name} from {src}")


if __name__ == "__main__":
    main()
