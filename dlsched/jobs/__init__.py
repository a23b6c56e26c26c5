"""Real runs that start processes running the hooks: eager-SGD's all-reduce job (:mod:`.eager_sgd`), the
parameter server under a batch policy (:mod:`.policy_run`) and CPU quotas (:mod:`.throttled_run`), and
``validate``'s cluster per transfer order (:mod:`.validate_run`, :mod:`.in_situ_oracle`, :mod:`.co_runner`)."""
