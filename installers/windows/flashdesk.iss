; Inno Setup 6 definition of flashdesk's per-user Windows installer.
; Built by installers\windows\build.ps1 -Steps Package, which passes:
;   /DAppVersion=<flashdesk's version>  /DSourceDir=<dist\flashdesk>  /DOutputDir=<dist>
;   and, when FLASHDESK_SIGN_CERT is set, /DSignInstaller /Sflashdesk=<signtool command>
; NOT RUN YET: written on Linux; only the Linux build was built and smoke-tested.
;
; Program folder vs data folder: the program goes to %LOCALAPPDATA%\Programs\flashdesk; the
; user's data (models, chats, audit log, settings, logs) lives in %LOCALAPPDATA%\flashdesk
; (engine/models/store.py default_home: platformdirs.user_data_dir("flashdesk", appauthor=False)).
; They must differ: the uninstaller removes the program folder, and an upgrade replaces its
; _internal folder. Nothing here touches the data folder, so upgrades and uninstalls keep it.

#ifndef AppVersion
  #error Pass /DAppVersion=<version> (build.ps1 does)
#endif
#ifndef SourceDir
  #define SourceDir "..\..\dist\flashdesk"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif

[Setup]
; The AppId identifies flashdesk across versions (upgrades, uninstall entry): never change it.
AppId={{BFB6B06B-6ED0-4B56-8987-A80F0F1386AB}
AppName=flashdesk
AppVersion={#AppVersion}
AppVerName=flashdesk {#AppVersion}
AppPublisher=flashdesk
; Per user, no administrator rights: {localappdata}\Programs\flashdesk (not {localappdata}\flashdesk,
; the data folder). The folder page is hidden so nobody installs into the data folder.
PrivilegesRequired=lowest
DefaultDirName={localappdata}\Programs\flashdesk
DisableDirPage=yes
DefaultGroupName=flashdesk
DisableProgramGroupPage=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#OutputDir}
OutputBaseFilename=flashdesk-{#AppVersion}-windows-x64-setup
; The model GGUF and the CUDA libraries make this large: LZMA2 in a separate process.
Compression=lzma2/max
SolidCompression=yes
LZMAUseSeparateProcess=yes
DiskSpanning=no
WizardStyle=modern
UninstallDisplayIcon={app}\flashdesk.exe
UninstallDisplayName=flashdesk
; A running flashdesk.exe would lock its DLLs: ask to close it (Restart Manager).
CloseApplications=yes
#ifdef SignInstaller
; "flashdesk" is the sign tool command build.ps1 passes with /Sflashdesk=...; it signs the setup
; and the uninstaller.
SignTool=flashdesk
SignedUninstaller=yes
#endif

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; An upgrade starts from a clean program folder (no stale DLLs from the previous version). This is
; {app}\_internal, the program's own files; the user's data folder is elsewhere.
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\flashdesk"; Filename: "{app}\flashdesk.exe"; WorkingDir: "{app}"
Name: "{autodesktop}\flashdesk"; Filename: "{app}\flashdesk.exe"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
; The "Launch flashdesk" checkbox on the last page.
Filename: "{app}\flashdesk.exe"; Description: "{cm:LaunchProgram,flashdesk}"; WorkingDir: "{app}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Only the program folder, if something was left in it. Never {localappdata}\flashdesk (the
; user's models, chats and audit log).
Type: dirifempty; Name: "{app}"
