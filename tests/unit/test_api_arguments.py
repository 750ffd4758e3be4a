"""The Python API raises UserError for every bad argument, naming it, before anything
loads or is written; the value checks (seed range, image size, names) give the CLI's
messages. Integers from NumPy and paths as pathlib.Path are taken as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cl_bench
from cl_bench import api, arguments
from cl_bench.errors import UserError


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (
            {"seed": "1993"},
            "seed='1993' (str): seed must be an integer from 0 to 4294967295, e.g. seed=1993.",
        ),
        ({"seed": True}, "seed=True (bool): seed must be an integer"),
        ({"seed": 1993.0}, "seed=1993.0 (float): seed must be an integer"),
        ({"seed": -1}, "--seeds -1: a seed must be an integer from 0 to 4294967295"),
        ({"name": None}, 'name=None (NoneType): name must be a string, e.g. name="fmnist".'),
        ({"name": ["synthetic"]}, "name=['synthetic'] (list): name must be a string"),
        ({"name": "fminst"}, 'Unknown scenario "fminst". Did you mean "fmnist"?'),
        ({"image_size": "32"}, "image_size='32' (str): image_size must be an integer or None"),
        ({"image_size": 0}, "--image-size 0: the input resolution must be a positive"),
        ({"backbone": 5}, "backbone=5 (int): backbone must be a string or None"),
        ({"weights": 5}, "weights=5 (int): weights must be a string or None"),
        ({"data_root": 5}, "data_root=5 (int): data_root must be a path"),
        ({"download": "no"}, "download='no' (str): download must be True or False"),
    ],
)
def test_scenario_bad_arguments(kwargs, needle):
    args = {"name": "synthetic", "image_size": 32} | kwargs
    with pytest.raises(UserError) as e:
        cl_bench.scenario(args.pop("name"), **args)
    assert needle in e.value.paragraph()


def test_scenario_takes_numpy_integers():
    bench = cl_bench.scenario("synthetic", seed=np.int64(1994), image_size=np.int32(32))
    assert bench.class_order == cl_bench.scenario("synthetic", seed=1994, image_size=32).class_order
    assert bench.class_order == np.random.RandomState(1994).permutation(10).tolist()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (
            {"settings": ["tosca.epochs=3"]},
            "settings=['tosca.epochs=3'] (list): settings must be a dict or None, e.g. "
            'settings={"tosca.epochs": 5}.',
        ),
        ({"settings": "tosca.epochs=3"}, "settings must be a dict or None"),
        ({"scenario": None}, "scenario=None (NoneType): scenario must be names"),
        ({"methods": 5}, "methods=5 (int): methods must be names"),
        ({"methods": {"tosca": 1}}, "methods must be names"),
        ({"methods": ""}, '--methods "" names no method'),
        ({"seeds": 1.5}, "seeds=1.5 (float): seeds must be an integer or a list of integers"),
        ({"seeds": "1993"}, "seeds='1993' (str): seeds must be an integer or a list"),
        ({"seeds": True}, "seeds must be an integer or a list of integers"),
        ({"seeds": [1993, None]}, "seeds must be integers, e.g. seeds=[1993, 1994]"),
        ({"seeds": [2**32]}, "--seeds 4294967296: a seed must be an integer from 0"),
        ({"out": None}, "out=None (NoneType): out must be a path (a string or a pathlib.Path)"),
        ({"out": b"results"}, "out must be a path"),
        ({"image_size": "32"}, "image_size='32' (str): image_size must be an integer or None"),
        ({"image_size": True}, "image_size=True (bool): image_size must be an integer or None"),
        ({"backbone": 5}, "backbone=5 (int): backbone must be a string or None"),
        ({"weights": 5}, "weights=5 (int): weights must be a string or None"),
        ({"data_root": 5}, "data_root=5 (int): data_root must be a path"),
        ({"device": 5}, 'device=5 (int): device must be a string, e.g. device="cuda".'),
        ({"device": "tpu"}, 'Unknown device "tpu"'),
        ({"precision": None}, "precision=None (NoneType): precision must be a string"),
        ({"protocol": None}, "protocol=None (NoneType): protocol must be a string"),
        ({"download": 1}, "download=1 (int): download must be True or False"),
        ({"progress": "yes"}, "progress='yes' (str): progress must be True or False"),
        ({"echo": 5}, "echo=5 (int): echo must be a function or None, e.g. echo=print."),
        (
            {"data_root": "a" * 300, "methods": ["simplecil"], "scenario": "fmnist-full"},
            "is too long for the filesystem",
        ),
    ],
)
def test_run_bad_arguments_raise_user_error_and_write_nothing(tmp_path, kwargs, needle):
    args = {
        "methods": ["simplecil"],
        "scenario": "synthetic",
        "out": tmp_path / "out",
        "image_size": 32,
        "precision": "fp32",
        "echo": None,
    } | kwargs
    with pytest.raises(UserError) as e:
        cl_bench.run(**args)
    assert needle in e.value.paragraph()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"sets": "tosca.epochs=3"}, "sets='tosca.epochs=3' (str): sets must be a list of strings"),
        ({"sets": [3]}, 'sets must be strings, e.g. sets=["tosca.epochs=5"]; got [3].'),
    ],
)
def test_plan_bad_sets(kwargs, needle):
    with pytest.raises(UserError) as e:
        api.plan(["simplecil"], "synthetic", **kwargs)
    assert needle in e.value.paragraph()


def test_plan_takes_numpy_integers_paths_and_set_values_with_commas(tmp_path):
    [req] = api.plan(
        ["simplecil"],
        "synthetic",
        np.arange(1993, 1995),
        out=tmp_path,
        image_size=np.int64(32),
        weights=tmp_path / "w.pth",
        data_root="~/data",
        sets=["scenario.dataset_args={seed: 1, size: 32}"],
    )
    assert req.seeds == [1993, 1994] and all(type(s) is int for s in req.seeds)
    assert type(req.image_size) is int and req.image_size == 32
    assert req.weights == str(tmp_path / "w.pth")
    assert req.data_root == Path.home() / "data"
    assert req.sets == ["scenario.dataset_args={seed: 1, size: 32}"]


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda t: cl_bench.load_results(None), "folder=None (NoneType): folder must be a path"),
        (lambda t: cl_bench.load_results(t, scenarios=5), "scenarios=5 (int): scenarios must be "),
        (
            lambda t: cl_bench.load_results(t, on_skip="warn"),
            "on_skip='warn' (str): on_skip must be a function or None",
        ),
        (lambda t: cl_bench.report(t, out=None), "out=None (NoneType): out must be a path"),
        (lambda t: cl_bench.report(t, out=t / "r", formats=5), "formats=5 (int): formats must be"),
        (lambda t: cl_bench.report(t, out=t / "r", images=[None]), "images must be names"),
        (lambda t: cl_bench.report(t, out=t / "r", on_skip=1), "on_skip=1 (int): on_skip must"),
        (lambda t: cl_bench.report(t / ("a" * 300), out=t / "r"), "is too long for the filesystem"),
    ],
)
def test_load_results_and_report_bad_arguments(tmp_path, call, needle):
    with pytest.raises(UserError) as e:
        call(tmp_path)
    assert needle in e.value.paragraph()
    assert not (tmp_path / "r").exists()


def test_names_as_on_the_command_line():
    """A string is comma-separated names, as on the command line (not its letters)."""
    assert arguments.names("scenarios", "fmnist", "") == ["fmnist"]
    assert arguments.names("methods", " tosca, simplecil,tosca ,", "") == ["tosca", "simplecil"]
    assert arguments.names("methods", ("l2p" for _ in range(2)), "") == ["l2p"]
