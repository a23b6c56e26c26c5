"""What a training script imports: the parameter-server hook (:mod:`.torch_ps`, with its :mod:`.ps_worker` and
:mod:`.ps_server`), TensorFlow's transfer ordering (:mod:`.tf_order`) and eager-SGD's partial all-reduce
(:mod:`.partial_allreduce`). What serves them is :mod:`dlsched.runtime`; jobs that run them, :mod:`dlsched.jobs`."""
