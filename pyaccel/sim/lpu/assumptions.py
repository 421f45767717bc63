"""The LPU engine's named assumptions (``lpu.*``), as reports list them: how the emulated TSP
schedules its slices, links and stages where the public record is silent. Each names the
mechanism it fixes; the preset files hold the numbers and their sources."""

ASSUMPTIONS = (
    "lpu.static_order: every functional slice and C2C link executes its instructions in the "
    "compiler's list order (in-order queues, no back-filling), so times are max-plus in the "
    "durations: a slower part never speeds a step",
    "lpu.c2c_transit: a C2C transfer crosses the stream transit TRANSITS_PER_C2C = 2 times (to "
    "the ports at the chip edge, and from them to the receiving slice), once per end of a stage "
    "hop",
    "lpu.memio_rate: activation and KV-cache vectors are written to MEM at one vector per cycle "
    "per stream of a direction (streams_per_direction vectors per cycle)",
    "lpu.sampled_token_bytes: the sampled maxima are all-gathered as ARGMAX_PAIR_BYTES = 8 per "
    "token (fp32 value + int32 index); the sampled token returns to the first stage as "
    "TOKEN_ID_BYTES = 4 per sequence (int32)",
    "lpu.cross_lane_reduce: norms and softmax reduce across lanes by SXM transposes of "
    "superlane-wide blocks plus VXM adds, each round a stream round trip",
    "lpu.attention_kv_installed: attention installs the shard's K then V cache into the MXM as "
    "weights and streams the query group through it (the cheaper of the two weight-stationary "
    "orientations at decode)",
    "lpu.attention_rows_share_kv: a sequence's rows of one step (a prompt chunk, a verify "
    "step) share its K/V: each K and V block of the sequence's cache is read from MEM and "
    "installed into the MXM once, and the query vectors of all its rows stream through it "
    "(rows x the group's query heads), each row's later keys masked in the softmax, as a "
    "prefill or verify kernel reads the cache once per sequence for all its query rows; "
    "different sequences' caches are installed each on their own. A block sits on one plane: "
    "with fewer blocks than planes the rows' vectors queue on those planes (no copies of a "
    "block onto idle planes to split the rows)",
    "lpu.tp_in_node: a stage's chips are one tensor-parallel group (inside a node, or whole "
    "nodes: lpu.wide_tp); all-reduce "
    "after row-split projections (one-shot or reduce-scatter+all-gather, the faster), the "
    "embedding row broadcast from its owner, the sampled maxima all-gathered",
    "lpu.stage_hops: activations pass to the next stage over parallel global ports (the node's "
    "ports shared over its rack peers) and are relayed to the stage's chips cut-through; the "
    "sampled token returns to the first stage the same way",
    "lpu.layer_order: ops run in graph order; only weight installs run ahead of their op",
    "lpu.stage_link_pipeline: micro-batches flow through the stages as a simulated schedule; "
    "a stage hop holds its ports for its sending window only, so a stage works on the next "
    "micro-batch while the last one's activations are still in flight",
    "lpu.collective_on_chip: a collective occupies its chip's streams for the vectors it "
    "sends, streams_per_direction a cycle as it starts (the memio resource), and its VXM for "
    "its partial sums at the times its transfer schedule gives; a chip busy there delays it. "
    "The C2C ports' send and receive logic is taken as the ports' own (no public text places "
    "it on a shared slice such as the SXM)",
    "lpu.relay_gap_fill: a stage hop's relay among the receiving stage's chips shares that "
    "stage's links with the collectives of the micro-batch it is working on; the compiler "
    "puts the relay in the first gap long enough that those collectives leave on any of the "
    "stage's links (their union), never moving the running program",
    "lpu.attention_sequence_split: on a tensor-parallel group wider than the KV heads, each KV "
    "head's tp / n_kv_heads chips split its cached tokens and combine their partial outputs "
    "and softmax (max, sum) pairs, SOFTMAX_STATS_BYTES = 8 per head (two fp32), with one "
    "all-reduce (flash-decoding's split-K)",
    "lpu.wide_tp: a group wider than a node is whole nodes of one rack; its collectives are "
    "hierarchical over local links and the node pairs' global ports (sim/lpu/wide.py), each "
    "chip realigning to global time before crossing nodes (deskew_cycles)",
)
