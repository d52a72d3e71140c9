"""A training run's plan: the pipeline's default windows and settings, the checkpoint folder's
name, and the state's scaling constants."""

from standins.tiny import tiny_params
from tasks.model.plan import Plan, checkpoint_dir, state_scales
from tests.tasks.model.test_walkforward import ten_bars


def test_the_checkpoint_folder_names_no_device(tmp_path):
    """A run checkpointed on a GPU resumes on a CPU and back (trainers/common/draws.py): the folder
    is named by the data and the training settings, not by where they ran."""
    cpu = tiny_params(tmp_path, "train.device=cpu")
    assert checkpoint_dir(cpu, "v1") == checkpoint_dir(tiny_params(tmp_path, "train.device=cuda"), "v1")
    assert checkpoint_dir(cpu, "v1") != checkpoint_dir(tiny_params(tmp_path, "ppo.lr=0.001"), "v1")


def test_the_default_plan_is_the_pipelines_splits_and_settings(tmp_path):
    params, fs = tiny_params(tmp_path), ten_bars()
    assert Plan().windows(fs) == (fs.window("train"), fs.window("validation")) == ((0, 3), (3, 6))
    assert Plan().configure(params, "v1") == params
    windowed = Plan(train_window=(0, 3), val_window=(3, 6))
    assert checkpoint_dir(params, "v1", windowed) != checkpoint_dir(params, "v1")  # a cycle's windows name its folder


def test_the_state_scales_are_the_cash_the_hmax_and_the_first_training_closes(tmp_path):
    params = tiny_params(tmp_path, "env.initial_cash=1000", "env.hmax=50")
    scales = state_scales(params, ten_bars())
    assert (scales.cash_scale, scales.shares_scale, scales.price_ref) == (1 / 1000, 1 / 50, (10.0,))
