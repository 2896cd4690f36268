"""The stages (``clusterclip.stages``): each a frozen options dataclass, checked once when
made in the parameters' names, and ``run(w: Workdir, options)``; and the work directory's
loaders, the one way each artifact is read."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing

import numpy as np
import pytest

import clusterclip.stages
from clusterclip.errors import InputError
from clusterclip.workdir import CENTROIDS, GROUPS, LABELS, SCHEDULE, SCORES, VALID, Workdir

STAGES = sorted(m.name for m in pkgutil.iter_modules(clusterclip.stages.__path__)
                if not m.name.startswith("_"))


def test_the_stages_are_there():
    assert {"cluster", "dedup", "embed", "run", "sample", "tokens"} <= set(STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_runs_a_workdir_with_its_frozen_options(name):
    module = importlib.import_module(f"clusterclip.stages.{name}")
    hints = typing.get_type_hints(module.run)
    params = list(inspect.signature(module.run).parameters)
    assert params[:2] == ["w", "options"] and hints["w"] is Workdir
    options = hints["options"]
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen


@pytest.mark.parametrize("make,param", [
    (lambda: _stage("cluster").ClusterOptions(n_clusters=0), "n_clusters"),
    (lambda: _stage("cluster").ClusterOptions(n_clusters=4, fit_sample=2), "fit_sample"),
    (lambda: _stage("cluster").SweepOptions(ks=(2, 4), sample_size=2), "sample_size"),
    (lambda: _stage("cluster").SweepOptions(ks=()), "ks"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, clip=0), "clip"),
    (lambda: _stage("sample").SampleOptions(num_samples=0), "num_samples"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, seed=2**64), "seed"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, mixture="/no/such/m.json"),
     "mixture"),
    (lambda: _stage("dedup").DedupOptions(threshold=1.5), "threshold"),
    (lambda: _stage("embed").EmbedOptions(embedder="fast", shard_size=0), "shard_size"),
])
def test_bad_options_are_refused_when_made_naming_the_parameter(make, param):
    with pytest.raises(InputError) as e:
        make()
    assert param in e.value.params and param in str(e.value) and "--" not in str(e.value)


def test_run_refuses_groups_without_the_dedup_stage():
    s = _stage("sample").SampleOptions(num_samples=10, groups=True)
    with pytest.raises(InputError, match="dedup") as e:
        _stage("run").RunOptions(embed=_stage("embed").EmbedOptions(embedder="fast"),
                                 cluster=_stage("cluster").ClusterOptions(n_clusters=2),
                                 sample=s)
    assert e.value.params == ("groups",)


def test_the_loaders_read_what_was_written_and_name_the_file_otherwise(tmp_path):
    w = Workdir(tmp_path / "W")
    labels = np.array([0, 2, -1, 1], dtype=np.int32)
    np.save(w.path(LABELS), labels)
    np.save(w.path(GROUPS), np.array([0, 1, -1, 1]))
    assert w.valid() is None  # no mask: every row counts
    np.save(w.path(VALID), labels >= 0)
    assert w.labels(4).tolist() == labels.tolist()
    assert w.valid(4).tolist() == [True, True, False, True]
    assert w.groups().tolist() == [0, 1, -1, 1]
    np.save(w.path(SCORES), np.array([0.5, 1.0, 0.0, 0.25], dtype=np.float32))
    np.save(w.path(CENTROIDS), np.eye(3, 4, dtype=np.float32))
    np.save(w.path(SCHEDULE), np.array([3, 0, 1, 1]))
    assert w.scores().tolist() == [0.5, 1.0, 0.0, 0.25] and w.centroids().shape == (3, 4)
    assert w.schedule().tolist() == [3, 0, 1, 1]
    with pytest.raises(InputError, match=f"{w.path(VALID)}: expected a bool array of shape"):
        w.valid(5)
    np.save(w.path(LABELS), labels.astype(float))
    with pytest.raises(InputError, match=str(w.path(LABELS))):
        w.labels()


def _stage(name):
    return importlib.import_module(f"clusterclip.stages.{name}")


@pytest.mark.parametrize("make,param", [
    (lambda: _stage("group").GroupOptions("out", docs_per_file=0), "docs_per_file"),
    (lambda: _stage("export").ExportOptions("out", rows_per_shard=0), "rows_per_shard"),
    (lambda: _stage("export").ExportOptions("out", format="csv"), "format"),
    (lambda: _stage("report").ReportOptions(clip=0), "clip"),
    (lambda: _stage("report").ReportOptions(windows=0), "windows"),
    (lambda: _stage("report").ReportOptions(tail_floor=-1.0), "tail_floor"),
    (lambda: _stage("report").ReportOptions(num_samples=0), "num_samples"),
    (lambda: _stage("report").ReportOptions(map_sample=-1), "map_sample"),
    (lambda: _stage("report").ReportOptions(strategies=("shuffled",)), "strategies"),
    (lambda: _stage("map").MapOptions(sample=-1), "sample"),
])
def test_the_output_stages_refuse_bad_options_when_made_naming_the_parameter(make, param):
    assert {"export", "group", "map", "report"} <= set(STAGES)
    test_bad_options_are_refused_when_made_naming_the_parameter(make, param)


def test_a_library_caller_catches_every_refusal_as_a_value_error():
    """A refusal is an InputError for the command line and a ValueError for a library
    caller's ``except ValueError`` (scikit-learn's convention)."""
    from clusterclip import make_sampler

    with pytest.raises(ValueError, match="clip") as e:
        _stage("sample").SampleOptions(num_samples=10, clip=0)
    assert isinstance(e.value, InputError)
    with pytest.raises(ValueError) as e:
        make_sampler(np.zeros(5, dtype=np.int64), num_samples=4, strategy="no-such-strategy")
    assert isinstance(e.value, InputError)
