"""Source selection: ranking and regime diagnosis, baselines on the same streams, metrics."""

from updatescope.select.baselines import (
    BASELINES,
    TaskStream,
    hscore,
    leep,
    linear_cka,
    logme,
    mean_gradient_cosine,
    random_scores,
    rsa,
    svcca,
)
from updatescope.select.interference import InterferenceTable, Plan, interference_table, plan
from updatescope.select.metrics import (
    bootstrap_ci,
    oracle_normalised_transfer,
    regret,
    spearman,
    summarise,
    top1_accuracy,
)
from updatescope.select.mixture import Mixture, mix
from updatescope.select.rank import Ranking, RankRow, diagnose, rank_sources
from updatescope.select.route import RouteChoice, RouteScores, direction_bank

__all__ = [
    "BASELINES",
    "InterferenceTable",
    "Plan",
    "Mixture",
    "RankRow",
    "RouteChoice",
    "RouteScores",
    "Ranking",
    "TaskStream",
    "bootstrap_ci",
    "diagnose",
    "direction_bank",
    "hscore",
    "interference_table",
    "leep",
    "linear_cka",
    "logme",
    "mean_gradient_cosine",
    "mix",
    "oracle_normalised_transfer",
    "plan",
    "random_scores",
    "rank_sources",
    "regret",
    "rsa",
    "spearman",
    "summarise",
    "svcca",
    "top1_accuracy",
]
