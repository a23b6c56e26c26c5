"""Real runs that start processes running the hooks: eager-SGD's all-reduce job (:mod:`.eager_sgd`), and the
parameter server under a batch policy (:mod:`.policy_run`) and CPU quotas (:mod:`.throttled_run`)."""
