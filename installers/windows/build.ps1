# Build the Windows app folder and its per-user installer, one function per step:
#     .\installers\windows\build.ps1                          # every step, in order
#     .\installers\windows\build.ps1 -Steps Setup,Bundle      # only these steps
# Steps: Setup · Model · Bundle · Sign · Package · Smoke (see each function).
# Needs: Python 3.11 (py launcher), Visual Studio 2022 C++ build tools (run from a Developer
# PowerShell, or after ilammy/msvc-dev-cmd in CI, so cl.exe and dumpbin.exe are on PATH),
# the CUDA toolkit (CUDA_PATH set) for the CUDA build, git (it applies native\llama-patches to the
# source of both builds), Inno Setup 6 for Package.
# NOT RUN YET: written and reviewed on Linux, where only installers/linux/build.sh was built
# and smoke-tested.
[CmdletBinding()]
param(
    [ValidateSet("Setup", "Model", "Bundle", "Sign", "Package", "Smoke")]
    [string[]]$Steps = @("Setup", "Bundle", "Sign", "Package", "Smoke")
)
$ErrorActionPreference = "Stop"
Set-StrictMode -Version Latest

$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
Set-Location $Root
$Py = Join-Path $Root ".venv\Scripts\python.exe"
$Dist = if ($env:FLASHDESK_DIST) { $env:FLASHDESK_DIST } else { Join-Path $Root "dist" }
$Work = if ($env:FLASHDESK_BUILD) { $env:FLASHDESK_BUILD } else { Join-Path $Root "build\pyinstaller" }
$Cache = if ($env:FLASHDESK_BUILD_CACHE) { $env:FLASHDESK_BUILD_CACHE } else { Join-Path $env:LOCALAPPDATA "flashdesk-build" }
$Wheels = Join-Path $Root "build\wheels"
$CudaSite = Join-Path $Root "build\cuda-site"   # the CUDA build of llama-cpp-python, outside the venv
$App = Join-Path $Dist "flashdesk"
$LlamaVersion = "0.3.36"

# Run a program, show its output, stop on failure (PowerShell 5.1 does not on its own). A simple
# function on purpose: its arguments ("-m", "-e" ...) reach the program as they are, and its output
# goes to the host, never into a caller's return value.
function Invoke-Native {
    $exe = $args[0]
    $rest = @($args | Select-Object -Skip 1)
    & $exe @rest | Out-Host
    if ($LASTEXITCODE -ne 0) { throw "$exe $($rest -join ' ') failed (exit $LASTEXITCODE)" }
}

# The output of scripts\llama_source.py (a digest, a folder), stopping on failure.
function Get-LlamaSource {
    $out = & $Py (Join-Path $Root "scripts\llama_source.py") @args
    if ($LASTEXITCODE -ne 0) { throw "scripts\llama_source.py $($args -join ' ') failed (exit $LASTEXITCODE)" }
    return ($out | Select-Object -Last 1)
}

function Build-LlamaWheel([string]$Name, [string]$Flags) {
    # One wheelhouse per flag set: build\wheels\cpu-<patch set> and build\wheels\cuda-<patch set> never mix.
    # Both are built from the source with native\llama-patches applied.
    $Name = "$Name-$(Get-LlamaSource digest)"
    $house = Join-Path $Wheels $Name
    if (-not (Get-ChildItem -Path $house -Filter "llama_cpp_python-$LlamaVersion-*.whl" -ErrorAction SilentlyContinue)) {
        Write-Host "Building llama-cpp-python $LlamaVersion ($Name`: $Flags) ..."
        $source = Get-LlamaSource unpack (Join-Path $Wheels "$Name.src")
        $env:CMAKE_ARGS = $Flags
        try { Invoke-Native $Py -m pip wheel --no-cache-dir --no-deps $source -w $house }
        finally { Remove-Item Env:CMAKE_ARGS -ErrorAction SilentlyContinue }
    }
    return $house
}

function Step-Setup {
    if (-not (Test-Path $Py)) { Invoke-Native py -3.11 -m venv .venv }
    Invoke-Native $Py -m pip install --disable-pip-version-check -q --upgrade pip
    # GGML_LLAMAFILE=ON: the fast prompt path above the verify band, which the patch keeps off it (scripts/setup.sh).
    # GGML_NATIVE=OFF: a build for other people's machines must not be tuned to the build machine's
    # CPU (-march=native: "illegal instruction" elsewhere) nor, with CUDA, to its GPU ("native"
    # CUDA architectures: fails on a runner without a GPU). With NATIVE off ggml targets an AVX2
    # baseline and its default list of CUDA architectures (override: FLASHDESK_CUDA_ARCHS).
    # GGML_BATCH_INVARIANT (native\llama-patches): verify rows computed like single tokens, on the
    # processor and on the graphics card, so that speculative decoding stays lossless on both.
    $cpuFlags = "-DGGML_LLAMAFILE=ON -DGGML_NATIVE=OFF -DGGML_BATCH_INVARIANT=ON"
    $cudaFlags = "-DGGML_CUDA=on $cpuFlags"
    if ($env:FLASHDESK_CUDA_ARCHS) { $cudaFlags += " -DCMAKE_CUDA_ARCHITECTURES=$($env:FLASHDESK_CUDA_ARCHS)" }
    if (-not $env:CUDA_PATH) { throw "CUDA_PATH is not set: install the CUDA toolkit (nvcc, cudart, cublas) first" }
    $cpu = Build-LlamaWheel "cpu" $cpuFlags
    $cuda = Build-LlamaWheel "cuda" $cudaFlags
    # The CPU build goes into the venv: PyInstaller bundles it into _internal\llama_cpp\lib.
    Invoke-Native $Py -m pip install --disable-pip-version-check -q --force-reinstall --no-deps --find-links $cpu "llama-cpp-python==$LlamaVersion"
    # The CUDA build goes into its own site folder; Bundle copies its DLLs to lib_cuda.
    if (Test-Path $CudaSite) { Remove-Item -Recurse -Force $CudaSite }
    Invoke-Native $Py -m pip install --disable-pip-version-check -q --no-deps --target $CudaSite --find-links $cuda "llama-cpp-python==$LlamaVersion"
    # flashdesk with its native library (scikit-build-core, MSVC) and PyInstaller; the CPU wheel
    # above already satisfies the llama-cpp-python pin.
    Invoke-Native $Py -m pip install --disable-pip-version-check -q --find-links $cpu -e ".[bundle]"
}

function Step-Model {
    # The default model, verified by the product's own pull, into a store used only for building.
    # Prints the GGUF's path last.
    & $Py -c "import sys; from engine.models.pull import pull; from engine.models.store import ModelStore, no_progress; print(pull(ModelStore(sys.argv[1]), 'smollm2', progress=no_progress).path)" $Cache
    if ($LASTEXITCODE -ne 0) { throw "model pull failed" }
}

function Get-CudaBin {
    # CUDA 12 keeps its DLLs in bin\, CUDA 13 in bin\x64\.
    foreach ($d in @((Join-Path $env:CUDA_PATH "bin\x64"), (Join-Path $env:CUDA_PATH "bin"))) {
        if (Get-ChildItem -Path $d -Filter "cudart64_*.dll" -ErrorAction SilentlyContinue) { return $d }
    }
    throw "no cudart64_*.dll under $env:CUDA_PATH\bin"
}

function Step-Bundle {
    $gguf = (Step-Model | Select-Object -Last 1)
    $env:FLASHDESK_BUNDLE_MODEL_FILE = $gguf
    try {
        Invoke-Native $Py -m PyInstaller --noconfirm --log-level WARN --distpath $Dist --workpath $Work installers\flashdesk.spec
    } finally { Remove-Item Env:FLASHDESK_BUNDLE_MODEL_FILE -ErrorAction SilentlyContinue }

    # Two builds of llama.cpp side by side:
    #   _internal\llama_cpp\lib\       the CPU build (collected by the spec, collect_dynamic_libs)
    #   _internal\llama_cpp\lib_cuda\  the CUDA build (llama.dll, ggml*.dll, ggml-cuda.dll, mtmd.dll)
    #                                  plus the CUDA runtime DLLs it links
    # How the app picks one at run time (engine/llama/build.py, called by engine/__init__.py before
    # anything imports llama_cpp): when nvcuda.dll loads and reports a GPU and a CUDA version at
    # least the bundled cudart64_<major>.dll's, it preloads lib_cuda\llama.dll with its own folder
    # searched first (LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR) and sets LLAMA_CPP_LIB_PATH (and
    # MTMD_CPP_LIB) to lib_cuda, which llama-cpp-python 0.3.36 reads once, at import; otherwise,
    # or when that preload fails, the CPU build in lib\. The reason (driver missing, too old, no
    # GPU, CUDA build failed to load) goes to the log, doctor and the models page. ggml's device
    # list is read from the chosen folder too (llama_cpp\_ggml.py would always load lib\'s).
    # So lib_cuda must hold the cudart64_*.dll whose name says the CUDA major version.
    $internal = Join-Path $App "_internal"
    $libCpu = Join-Path $internal "llama_cpp\lib"
    $libCuda = Join-Path $internal "llama_cpp\lib_cuda"
    if (-not (Test-Path (Join-Path $libCpu "llama.dll"))) { throw "the CPU build's llama.dll is not in $libCpu" }
    New-Item -ItemType Directory -Force -Path $libCuda | Out-Null
    Copy-Item -Force (Join-Path $CudaSite "llama_cpp\lib\*.dll") $libCuda
    if (-not (Test-Path (Join-Path $libCuda "ggml-cuda.dll"))) { throw "the CUDA build has no ggml-cuda.dll: was it built with GGML_CUDA=on?" }
    $cudaBin = Get-CudaBin
    foreach ($pattern in @("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll")) {
        $found = Get-ChildItem -Path $cudaBin -Filter $pattern
        if (-not $found) { throw "$pattern not found in $cudaBin" }
        $found | Copy-Item -Destination $libCuda -Force
    }
    # The CUDA DLLs were not seen by PyInstaller's dependency analysis: check what they import.
    Test-DllImports $libCuda $internal
    Write-Host "app folder: $App"
}

function Test-DllImports([string]$Dir, [string]$Internal) {
    # Every DLL a lib_cuda DLL imports must be in lib_cuda, in _internal, or a Windows/driver DLL.
    # dumpbin comes with MSVC; without it this check is skipped with a warning.
    $dumpbin = Get-Command dumpbin.exe -ErrorAction SilentlyContinue
    if (-not $dumpbin) { Write-Warning "dumpbin.exe not on PATH: lib_cuda's imports were not checked"; return }
    $present = @{}
    foreach ($f in (Get-ChildItem -Path $Dir, $Internal -Filter *.dll)) { $present[$f.Name.ToLower()] = $true }
    $missing = @()
    foreach ($dll in (Get-ChildItem -Path $Dir -Filter *.dll)) {
        $out = & $dumpbin.Source /nologo /dependents $dll.FullName
        foreach ($line in $out) {
            $name = $line.Trim().ToLower()
            if ($name -notmatch '^[\w.-]+\.dll$' -or $present.ContainsKey($name)) { continue }
            if ($name -eq "nvcuda.dll" -or $name -like "api-ms-win-*" -or (Test-Path (Join-Path $env:SystemRoot "System32\$name"))) {
                # The MSVC C++ runtime may sit in System32 on the build machine and not on a user's.
                if ($name -match '^(msvcp140|vcruntime140|vcruntime140_1|concrt140)') {
                    Copy-Item -Force (Join-Path $env:SystemRoot "System32\$name") $Internal
                    $present[$name] = $true
                }
                continue
            }
            $missing += "$($dll.Name) -> $name"
        }
    }
    if ($missing) { throw "DLLs imported but not bundled:`n$($missing -join "`n")" }
}

function Get-Version {
    $v = & $Py -c "from importlib.metadata import version; print(version('flashdesk'))"
    if ($LASTEXITCODE -ne 0) { throw "flashdesk is not installed in .venv: run the Setup step" }
    return $v.Trim()
}

function Get-SignTool {
    $st = Get-Command signtool.exe -ErrorAction SilentlyContinue
    if ($st) { return $st.Source }
    $kit = Get-ChildItem -Path "${env:ProgramFiles(x86)}\Windows Kits\10\bin\*\x64\signtool.exe" -ErrorAction SilentlyContinue |
        Sort-Object FullName | Select-Object -Last 1
    if (-not $kit) { throw "signtool.exe not found (Windows SDK)" }
    return $kit.FullName
}

function Test-Signing {
    return [bool]$env:FLASHDESK_SIGN_CERT
}

function Get-TimestampUrl {
    if ($env:FLASHDESK_SIGN_TIMESTAMP_URL) { return $env:FLASHDESK_SIGN_TIMESTAMP_URL }
    return "http://timestamp.digicert.com"
}

function Step-Sign {
    # Certificate: FLASHDESK_SIGN_CERT (a .pfx file), FLASHDESK_SIGN_PASSWORD (its password),
    # FLASHDESK_SIGN_TIMESTAMP_URL (RFC 3161 timestamp server; default DigiCert's public one).
    if (-not (Test-Signing)) { Write-Host "Sign: FLASHDESK_SIGN_CERT is not set, skipping (the app and installer stay unsigned)"; return }
    $signtool = Get-SignTool
    $files = @(Join-Path $App "flashdesk.exe") + @(Get-ChildItem -Path $App -Recurse -Include *.dll, *.pyd | ForEach-Object FullName)
    $args0 = @("sign", "/f", $env:FLASHDESK_SIGN_CERT, "/fd", "sha256", "/tr", (Get-TimestampUrl), "/td", "sha256")
    if ($env:FLASHDESK_SIGN_PASSWORD) { $args0 += @("/p", $env:FLASHDESK_SIGN_PASSWORD) }
    # Batches keep the command line under Windows' length limit.
    for ($i = 0; $i -lt $files.Count; $i += 50) {
        $batch = $files[$i..([Math]::Min($i + 49, $files.Count - 1))]
        & $signtool @args0 @batch
        if ($LASTEXITCODE -ne 0) { throw "signtool failed (exit $LASTEXITCODE)" }
    }
    Write-Host "signed $($files.Count) files"
}

function Get-Iscc {
    $c = Get-Command iscc.exe -ErrorAction SilentlyContinue
    if ($c) { return $c.Source }
    foreach ($p in @("${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe", "$env:ProgramFiles\Inno Setup 6\ISCC.exe", "$env:LOCALAPPDATA\Programs\Inno Setup 6\ISCC.exe")) {
        if (Test-Path $p) { return $p }
    }
    throw "ISCC.exe (Inno Setup 6) not found"
}

function Step-Package {
    $iscc = Get-Iscc
    $isccArgs = @("/DAppVersion=$(Get-Version)", "/DSourceDir=$App", "/DOutputDir=$Dist")
    if (Test-Signing) {
        # flashdesk.iss uses SignTool=flashdesk when SignInstaller is defined; $f is the file Inno
        # Setup signs (the setup and its uninstaller), $q a double quote.
        $cmd = "`$q$(Get-SignTool)`$q sign /f `$q$($env:FLASHDESK_SIGN_CERT)`$q /fd sha256 /tr $(Get-TimestampUrl) /td sha256"
        if ($env:FLASHDESK_SIGN_PASSWORD) { $cmd += " /p `$q$($env:FLASHDESK_SIGN_PASSWORD)`$q" }
        $isccArgs += @("/DSignInstaller", "/Sflashdesk=$cmd `$f")
    } else {
        Write-Host "Package: FLASHDESK_SIGN_CERT is not set, the installer stays unsigned"
    }
    Invoke-Native $iscc @isccArgs (Join-Path $PSScriptRoot "flashdesk.iss")
    Get-ChildItem -Path $Dist -Filter "flashdesk-*-setup.exe" | ForEach-Object { Write-Host "package: $($_.FullName)" }
}

function Step-Smoke {
    & $Py -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('openai') is None)"
    if ($LASTEXITCODE -ne 0) { Invoke-Native $Py -m pip install --disable-pip-version-check -q "openai>=1.40" }
    Invoke-Native $Py installers\smoke_test.py (Join-Path $App "flashdesk.exe")
}

foreach ($step in $Steps) {
    Write-Host "== $step"
    & "Step-$step"
}
