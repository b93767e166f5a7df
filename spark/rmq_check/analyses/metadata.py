"""metadata: controller metadata observed by admin ops (``f=metadata``: broker group, master,
epoch). Two properties, per broker group:

* epoch-backwards: an observation invoked after another observation completed (real-time
  order, by history index) reports a lower masterEpoch;
* two-masters: two different masters reported for one epoch.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result, verdict
from rmq_check.core import Frames, example_rows


def run(fr: Frames) -> dict[str, Any]:
    c = F.col
    if not fr.has("metadata", "ok"):
        return result(UNKNOWN, 0, [], applies=False, reason="no metadata ops in the history")
    obs = fr.pairs().where(
        (c("f") == "metadata")
        & (c("type") == "ok")
        & c("broker").isNotNull()
        & c("epoch").isNotNull()
    )
    n_obs = obs.count()
    ev = obs.select(
        "broker", c("inv_idx").alias("t"), F.lit(0).alias("kind"), "epoch", "master", "process"
    ).unionByName(
        obs.select(
            "broker", c("comp_idx").alias("t"), F.lit(1).alias("kind"), "epoch", "master", "process"
        )
    )
    w = (
        Window.partitionBy("broker")
        .orderBy("t", "kind")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    x = ev.select("*", F.max(F.when(c("kind") == 1, c("epoch"))).over(w).alias("seen"))
    back = x.where((c("kind") == 0) & (c("epoch") < c("seen"))).select(
        "broker",
        c("t").alias("invoke_index"),
        "process",
        "epoch",
        "master",
        c("seen").alias("after_epoch"),
    )
    n_back = back.count()
    two = (
        obs.where(c("master").isNotNull())
        .groupBy("broker", "epoch")
        .agg(F.sort_array(F.collect_set("master")).alias("masters"))
        .where(F.size("masters") > 1)
    )
    n_two = two.count()
    k = fr.cfg.examples
    back_ex = example_rows(back.orderBy("broker", "invoke_index"), k) if n_back else []
    two_ex = example_rows(two.orderBy("broker", "epoch"), k) if n_two else []
    n = n_back + n_two
    return result(
        verdict(n),
        n,
        back_ex + two_ex,
        observations=n_obs,
        epoch_backwards=result(verdict(n_back), n_back, back_ex),
        two_masters=result(verdict(n_two), n_two, two_ex),
    )
