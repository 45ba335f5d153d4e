# -*- Python -*-
# lit configuration for ztrain.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "ztrain"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "e2e"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.ztrain_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"
config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%ztrain_src", config.ztrain_src_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.ztrain_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["ztrain-opt", "ztrain-compile", "ztrain-run"], tool_dirs)
if config.ztrain_has_runtime:
    config.available_features.add("runtime")
