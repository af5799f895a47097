#!/bin/sh
# Build step of both images: copies the model directory that the embedded default config
# (configs/tiny-cpu.yaml, model.dir, relative to configs/) names, wherever it lives in the source
# tree, to /opt/rankd/models/default (docker/rankd.yaml's model.dir).
#   bundle_default_model.sh SOURCE_TREE
set -eu
src=$1
dir=$(sed -n 's/^  dir: *//p' "$src/configs/tiny-cpu.yaml")
if [ -z "$dir" ] || [ ! -f "$src/configs/$dir/config.json" ]; then
  echo "bundle_default_model: configs/tiny-cpu.yaml model.dir '$dir' has no config.json" >&2
  exit 1
fi
mkdir -p /opt/rankd/models
cp -rL "$src/configs/$dir" /opt/rankd/models/default
