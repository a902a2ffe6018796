;;; driver.el --- FrogNano's eglot test driver: batch Emacs against `frognano serve'  -*- lexical-binding: t -*-

;; Run by tests/editors/test_emacs.py as
;;
;;   emacs --batch -Q -l tests/editors/emacs/driver.el
;;
;; It loads eglot the way a user of Debian's elpa-eglot has it (the distribution's package
;; directory, or Emacs 29's own eglot), registers `frognano serve' for python-mode in
;; `eglot-server-programs' with :initializationOptions, opens one Python file, starts eglot on
;; it and then works only through eglot's own functions: flymake diagnostics
;; (`flymake-diagnostics'), `eglot-code-actions' (called as the interactive command is, with the
;; completing-read menu answered by the fix's title), so the verified fix's WorkspaceEdit and
;; its command go through `eglot--apply-workspace-edit' and `eglot-execute-command', and
;; `save-buffer'.
;;
;; Batch Emacs runs no idle timers and reads process output only while it waits, so every wait
;; here is `frognano-test--idle': it waits in `accept-process-output' and runs the idle timers
;; whose delay the idle time so far has reached (eglot's didChange timer, flymake's, eldoc's),
;; each once per idle period, as an interactive Emacs sitting idle would.  Every wait stops at
;; the deadline (FROGNANO_TEST_BUDGET_S); the JSON result is written whatever happened.
;;
;; Parameters (environment):
;;   FROGNANO_TEST_PYTHON    the interpreter that runs `-m frognano serve' (and the tests)
;;   FROGNANO_TEST_FILE      the Python file to open (absolute)
;;   FROGNANO_TEST_ROOT      the project's folder (other files' diagnostics are named relative to it)
;;   FROGNANO_TEST_SCENARIO  flow (fix, save, clear) | unsaved (fix, no save, clear) |
;;                           diagnostics (open, wait for diagnostics: nothing else) |
;;                           slowfix ("Fix with FrogNano" on a project whose fix takes minutes:
;;                           the command's answer, Emacs meanwhile, then the session ends) |
;;                           probe (load eglot, start nothing)
;;   FROGNANO_TEST_RESULT    where the JSON result goes
;;   FROGNANO_TEST_BUDGET_S  seconds for the whole scenario
;;   FROGNANO_TEST_CLEAR_S   seconds the unsaved scenario waits for the diagnostics to clear
;;   FROGNANO_TEST_AUTOFIX   the autoFix initialization option (default "suggest")
;;   FROGNANO_TEST_WATCH_S   seconds the slowfix scenario watches the running fix (default 4)
;;   FROGNANO_EMACS_ELPA     the distribution's package directory
;;                           (default /usr/share/emacs/site-lisp/elpa)
;;   FROGNANO_EMACS_HOME     user-emacs-directory and package-user-dir (a scratch folder)

;;; Code:

(require 'cl-lib)
(require 'json)
(require 'subr-x)

(defvar frognano-test--start (float-time))
(defvar frognano-test--budget (string-to-number (or (getenv "FROGNANO_TEST_BUDGET_S") "45")))
(defvar frognano-test--deadline (+ frognano-test--start frognano-test--budget))
(defvar frognano-test--result (list (cons 'step "start")))
(defvar frognano-test--sent nil "Messages sent to the server, newest first.")
(defvar frognano-test--statuses nil "frognano/status notifications, newest first.")
(defvar frognano-test--shown nil "window/showMessage notifications, newest first.")
(defvar frognano-test--server nil)
(defvar frognano-test--commands nil
  "`eglot-execute-command' calls, newest first: the command, when, how long it took to answer,
the answer or the error.")
(defvar frognano-test--progress nil "$/progress notifications, newest first.")
(defvar frognano-test--results nil "frognano/result notifications, newest first.")
(defvar frognano-test--requests nil "Requests from the server (their methods), newest first.")

(defun frognano-test--bool (value) (if value t :json-false))
(defun frognano-test--now () (- (float-time) frognano-test--start))
(defun frognano-test--left () (- frognano-test--deadline (float-time)))

(defun frognano-test--put (key value)
  "Record VALUE under KEY in the result."
  (setf (alist-get key frognano-test--result) value))

(defun frognano-test--get (key)
  (alist-get key frognano-test--result))

(defun frognano-test--time (key)
  "Record the seconds since the start under timings.KEY."
  (let ((timings (alist-get 'timings frognano-test--result)))
    (setf (alist-get key timings) (frognano-test--now))
    (frognano-test--put 'timings timings)))

(defun frognano-test--step (name)
  (frognano-test--put 'step name)
  (message "[frognano-test %.2fs] step %s" (frognano-test--now) name))

;;; Loading eglot: the distribution's elpa packages (elpa-eglot), else Emacs's own.

(let ((home (or (getenv "FROGNANO_EMACS_HOME") (make-temp-file "frognano-emacs" t)))
      (elpa (or (getenv "FROGNANO_EMACS_ELPA") "/usr/share/emacs/site-lisp/elpa")))
  (setq user-emacs-directory (file-name-as-directory home))
  (require 'package)
  (setq package-user-dir (expand-file-name "elpa" home)
        package-directory-list (and (file-directory-p elpa) (list elpa)))
  (package-initialize)
  (require 'eglot))

;; A user's everyday settings, nothing eglot-specific: no questions, no backup files.
(setq make-backup-files nil
      auto-save-default nil
      use-dialog-box nil
      eglot-sync-connect 10
      eglot-connect-timeout 30)

(defvar frognano-test--python (getenv "FROGNANO_TEST_PYTHON"))
(defvar frognano-test--init-options
  (list :autoFix (or (getenv "FROGNANO_TEST_AUTOFIX") "suggest")
        :debounceMs 50
        :python frognano-test--python))

;; The one line of configuration an eglot user writes (init.el), with the server options.
(add-to-list 'eglot-server-programs
             `(python-mode ,frognano-test--python "-m" "frognano" "serve"
                           :initializationOptions ,frognano-test--init-options))

(defun frognano-test--eglot-version ()
  (let ((desc (cadr (assq 'eglot package-alist))))
    (and desc (package-version-join (package-desc-version desc)))))

;; FrogNano's own notification, as a user would show it in the mode line: recorded here.
(cl-defmethod eglot-handle-notification
  (_server (_method (eql frognano/status)) &rest params)
  (push (append (list :t (frognano-test--now)) params) frognano-test--statuses))

;; Record what eglot sends (the order of executeCommand and didChange matters to the server).
(defun frognano-test--record-send (_connection &rest args)
  (let* ((method (plist-get args :method))
         (params (plist-get args :params)))
    (when (eq method :initialize)
      (frognano-test--put 'initialize (list :rootUri (plist-get params :rootUri)
                                             :workspaceFolders (plist-get params :workspaceFolders)
                                             :initializationOptions
                                             (plist-get params :initializationOptions)
                                             ;; workDoneProgress would be announced here
                                             :window (plist-get (plist-get params :capabilities)
                                                                :window))))
    (when method
      (push (list :t (frognano-test--now)
                  :method (if (keywordp method) (substring (symbol-name method) 1) (format "%s" method))
                  :id (plist-get args :id)
                  :command (and (listp params) (plist-get params :command))
                  :version (and (listp params)
                                (plist-get (plist-get params :textDocument) :version)))
            frognano-test--sent))))
(advice-add 'jsonrpc-connection-send :before #'frognano-test--record-send)

;; Messages the server shows the user (window/showMessage), still shown as eglot does; and
;; what eglot has no handler of its own for: $/progress (eglot 1.9 drops it) and FrogNano's
;; frognano/result (a started command's outcome).
(advice-add 'eglot-handle-notification :before
            (lambda (_server method &rest params)
              (pcase (format "%s" method)
                ("window/showMessage"
                 (push (list :t (frognano-test--now) :message (plist-get params :message))
                       frognano-test--shown))
                ("$/progress"
                 (let ((value (plist-get params :value)))
                   (push (list :t (frognano-test--now) :token (plist-get params :token)
                               :kind (plist-get value :kind) :title (plist-get value :title)
                               :message (plist-get value :message))
                         frognano-test--progress)))
                ("frognano/result"
                 (push (append (list :t (frognano-test--now)) params) frognano-test--results)))))

;; Requests from the server (window/workDoneProgress/create among them), answered as eglot does.
(advice-add 'eglot-handle-request :before
            (lambda (_server method &rest _params)
              (push (list :t (frognano-test--now) :method (format "%s" method)) frognano-test--requests)))

;; How long eglot waits for each command's answer: `eglot-execute-command' is a synchronous
;; `jsonrpc-request' (10 s timeout), so Emacs is frozen for exactly this long.
(defun frognano-test--time-command (run server command arguments)
  (let ((at (frognano-test--now))
        (start (float-time)))
    (condition-case err
        (let ((answer (funcall run server command arguments)))
          (push (list :command (format "%s" command) :t at :seconds (- (float-time) start)
                      :result answer)
                frognano-test--commands)
          answer)
      (error
       (push (list :command (format "%s" command) :t at :seconds (- (float-time) start)
                   :error (error-message-string err))
             frognano-test--commands)
       (signal (car err) (cdr err))))))
(advice-add 'eglot-execute-command :around #'frognano-test--time-command)

;;; Waiting like an idle interactive Emacs.

(defun frognano-test--server-dead-p ()
  (and frognano-test--server (not (jsonrpc-running-p frognano-test--server))))

(defun frognano-test--idle (condition &optional seconds)
  "Sit idle until CONDITION returns non-nil, SECONDS pass, the deadline or the server's end.
Process output is read; the idle timers whose delay the idleness so far has reached run, each
once per call (one idle period).  Returns CONDITION's value."
  (let* ((start (float-time))
         (stop (min frognano-test--deadline (+ start (or seconds frognano-test--budget))))
         (ran nil)
         (value nil))
    (while (and (not (setq value (funcall condition)))
                (< (float-time) stop)
                (not (frognano-test--server-dead-p)))
      (accept-process-output nil 0.05)
      (let ((idle (- (float-time) start)))
        (dolist (timer (copy-sequence timer-idle-list))
          (when (and (not (memq timer ran))
                     (<= (float-time (timer--time timer)) idle))
            (push timer ran)
            (timer-event-handler timer)))))
    value))

;;; What the buffer shows.

(defun frognano-test--ours-p (diag)
  (string-prefix-p "frognano" (flymake-diagnostic-text diag)))

(defun frognano-test--lsp (diag)
  (cdr (assq 'eglot-lsp-diag (flymake-diagnostic-data diag))))

(defun frognano-test--diags (buffer)
  "FrogNano's flymake diagnostics in BUFFER, as JSON-ready plists."
  (with-current-buffer buffer
    (cl-loop for d in (flymake-diagnostics)
             when (frognano-test--ours-p d)
             collect (list :line (line-number-at-pos (flymake-diagnostic-beg d))
                           :type (symbol-name (flymake-diagnostic-type d))
                           :text (flymake-diagnostic-text d)
                           :beg (flymake-diagnostic-beg d) :end (flymake-diagnostic-end d)
                           :lsp (frognano-test--lsp d)))))

(defun frognano-test--other-diags ()
  "FrogNano's diagnostics of files not visited (`flymake-list-only-diagnostics')."
  (cl-loop for (path . diags) in flymake-list-only-diagnostics
           append (cl-loop for d in diags
                           when (frognano-test--ours-p d)
                           collect (list :file (file-relative-name path (frognano-test--root))
                                         :line (car (flymake-diagnostic-beg d))
                                         :type (symbol-name (flymake-diagnostic-type d))
                                         :text (flymake-diagnostic-text d)))))

(defun frognano-test--root ()
  "The project copy the test made (FROGNANO_TEST_ROOT), else eglot's project root."
  (or (getenv "FROGNANO_TEST_ROOT")
      (and frognano-test--server (expand-file-name (project-root (eglot--project frognano-test--server))))
      default-directory))

(defun frognano-test--state ()
  (plist-get (car frognano-test--statuses) :state))

(defun frognano-test--action-summary (action)
  (let ((command (plist-get action :command)))
    (list :title (plist-get action :title)
          :kind (plist-get action :kind)
          :command (if (stringp command) command (plist-get command :command))
          :arguments (if (stringp command) (plist-get action :arguments) (plist-get command :arguments))
          :hasEdit (and (plist-get action :edit) t)
          :isPreferred (plist-get action :isPreferred)
          :data (plist-get action :data))))

(defun frognano-test--verified-p (action)
  (and (equal (plist-get (plist-get action :data) :frognano) "verifiedFix")
       (plist-get action :edit)))

;;; The scenarios.

(defun frognano-test--connect (file)
  "Visit FILE, start eglot on it as M-x eglot does; return its buffer."
  (frognano-test--step "open")
  (find-file file)
  (let ((buffer (current-buffer)))
    (frognano-test--put 'major_mode (symbol-name major-mode))
    (frognano-test--step "connect")
    (let ((guess (eglot--guess-contact)))
      (frognano-test--put 'project_root (expand-file-name (project-root (nth 1 guess))))
      (frognano-test--put 'project_kind (format "%s" (car-safe (nth 1 guess))))
      (setq frognano-test--server (apply #'eglot guess)))
    (unless (frognano-test--idle (lambda () (buffer-local-value 'eglot--managed-mode buffer)))
      (error "eglot never managed %s (server %s)" file frognano-test--server))
    (setq frognano-test--server (with-current-buffer buffer (eglot-current-server)))
    (frognano-test--time 'connected)
    (frognano-test--put 'server_info (eglot--server-info frognano-test--server))
    (frognano-test--put 'server_commands
                        (plist-get (plist-get (eglot--capabilities frognano-test--server)
                                              :executeCommandProvider)
                                   :commands))
    ;; flymake-mode defers its first check to after the current command / until the buffer is
    ;; displayed: neither happens in batch, so start it as that first check would.
    (with-current-buffer buffer
      (frognano-test--put 'flymake_mode (frognano-test--bool flymake-mode))
      (unless eglot--current-flymake-report-fn (flymake-start))
      (frognano-test--put 'flymake_started (frognano-test--bool eglot--current-flymake-report-fn)))
    buffer))

(defun frognano-test--wait-diagnostics (buffer)
  (frognano-test--step "diagnostics")
  (unless (frognano-test--idle (lambda () (frognano-test--diags buffer)))
    (error "no FrogNano diagnostics in %s" (buffer-name buffer)))
  (frognano-test--time 'diagnostics)
  ;; The other files' diagnostics of the same run come in the same burst.
  (frognano-test--idle (lambda () (frognano-test--other-diags)) 2)
  (frognano-test--put 'diagnostics (vconcat (frognano-test--diags buffer)))
  (frognano-test--put 'other_diagnostics (vconcat (frognano-test--other-diags))))

(defun frognano-test--fix (buffer)
  "List the code actions at the first diagnostic; wait for the verified fix; apply it through
eglot's code-action command.  Returns the diagnostic's region."
  (with-current-buffer buffer
    (let* ((diag (car (cl-remove-if-not #'frognano-test--ours-p (flymake-diagnostics))))
           (beg (flymake-diagnostic-beg diag))
           (end (flymake-diagnostic-end diag))
           (actions nil)
           (fix nil)
           (asked 0))
      (frognano-test--step "code actions")
      (goto-char beg)
      (setq actions (eglot-code-actions beg end)
            asked (float-time))
      (frognano-test--time 'actions)
      (frognano-test--put 'first_actions (vconcat (mapcar #'frognano-test--action-summary actions)))
      (frognano-test--step "verified fix")
      (frognano-test--idle
       (lambda ()
         (or (setq fix (cl-find-if #'frognano-test--verified-p actions))
             ;; Ask again soon once the server says it has one, every few seconds before.
             (when (> (- (float-time) asked)
                      (if (equal (frognano-test--state) "fixed") 0.3 3))
               (setq asked (float-time)
                     actions (eglot-code-actions beg end))
               (setq fix (cl-find-if #'frognano-test--verified-p actions))))))
      (unless fix
        (error "no verified fix among the code actions (last: %S)"
               (mapcar (lambda (a) (plist-get a :title)) actions)))
      (frognano-test--time 'fix_ready)
      (frognano-test--put 'fix (frognano-test--action-summary fix))
      (frognano-test--put 'fix_changes (plist-get (plist-get fix :edit) :documentChanges))
      (frognano-test--step "apply")
      ;; M-x eglot-code-actions at the diagnostic, picking the fix from the menu.
      (let ((menu nil)
            (last-nonmenu-event ?\r))     ; a keyboard invocation: completing-read, not a popup
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (prompt collection &rest _)
                     (setq menu (list :prompt prompt
                                      :items (vconcat (mapcar (lambda (c) (if (consp c) (car c) c))
                                                              collection))))
                     (plist-get fix :title))))
          (eglot-code-actions beg end nil t))
        (frognano-test--put 'menu menu))
      (frognano-test--time 'applied)
      (frognano-test--put 'line15 (save-excursion (goto-char (point-min)) (forward-line 14)
                                                  (buffer-substring-no-properties
                                                   (line-beginning-position) (line-end-position))))
      (frognano-test--put 'modified_after_apply (frognano-test--bool (buffer-modified-p)))
      (cons beg end))))

(defun frognano-test--cleared-p (buffer)
  (and (null (frognano-test--diags buffer))
       (null (frognano-test--other-diags))
       (equal (frognano-test--state) "passing")))

(defun frognano-test--scenario-flow (buffer save clear-seconds)
  (frognano-test--wait-diagnostics buffer)
  (frognano-test--fix buffer)
  (when save
    (frognano-test--step "save")
    (with-current-buffer buffer (save-buffer))
    (frognano-test--time 'saved)
    (frognano-test--put 'modified_after_save (frognano-test--bool (buffer-modified-p buffer))))
  (frognano-test--step "clear")
  (let ((since (float-time)))
    (unless (frognano-test--idle (lambda () (frognano-test--cleared-p buffer)) clear-seconds)
      (error "FrogNano's diagnostics did not clear (with a passing run) within %.1f s %s"
             (- (float-time) since) (if save "of the save" "of applying the fix, without a save"))))
  (frognano-test--time 'cleared)
  (frognano-test--put 'modified_at_end (frognano-test--bool (buffer-modified-p buffer))))

(defun frognano-test--first-diag-actions (buffer)
  "The code actions at BUFFER's first FrogNano diagnostic (as flymake's menu would ask)."
  (with-current-buffer buffer
    (let ((diag (car (cl-remove-if-not #'frognano-test--ours-p (flymake-diagnostics)))))
      (eglot-code-actions (flymake-diagnostic-beg diag) (flymake-diagnostic-end diag)))))

(defun frognano-test--pick (buffer title)
  "M-x eglot-code-actions at BUFFER's first FrogNano diagnostic, picking TITLE from the menu.
Returns (SECONDS MENU ERROR): how long Emacs was busy in the command, the menu it showed, and
the error it signalled (nil: none)."
  (with-current-buffer buffer
    (let* ((diag (car (cl-remove-if-not #'frognano-test--ours-p (flymake-diagnostics))))
           (beg (flymake-diagnostic-beg diag))
           (end (flymake-diagnostic-end diag))
           (menu nil)
           (failure nil)
           (last-nonmenu-event ?\r)     ; a keyboard invocation: completing-read, not a popup
           (start (float-time)))
      (goto-char beg)
      (cl-letf (((symbol-function 'completing-read)
                 (lambda (prompt collection &rest _)
                   (setq menu (list :prompt prompt
                                    :items (vconcat (mapcar (lambda (c) (if (consp c) (car c) c))
                                                            collection))))
                   title)))
        (condition-case err
            (eglot-code-actions beg end nil t)
          (error (setq failure (error-message-string err)))))
      (list (- (float-time) start) menu failure))))

(defun frognano-test--scenario-slowfix (buffer)
  "\"Fix with FrogNano\" on a project whose fix takes minutes: eglot's command must come back
at once, Emacs and the server stay responsive while the fix runs; then the session ends."
  (frognano-test--wait-diagnostics buffer)
  (frognano-test--step "fix command")
  (frognano-test--put 'first_actions
                      (vconcat (mapcar #'frognano-test--action-summary
                                       (frognano-test--first-diag-actions buffer))))
  (pcase-let ((`(,seconds ,menu ,failure) (frognano-test--pick buffer "Fix with FrogNano")))
    (frognano-test--put 'fix_command_s seconds)
    (frognano-test--put 'menu menu)
    (frognano-test--put 'fix_command_error failure)
    (when failure (error "Fix with FrogNano failed after %.1f s: %s" seconds failure)))
  (frognano-test--time 'fix_answered)
  (frognano-test--step "fixing")
  (unless (frognano-test--idle (lambda () (equal (frognano-test--state) "fixing")) 10)
    (error "frognano/status never said \"fixing\" after Fix with FrogNano (last: %S)"
           (car frognano-test--statuses)))
  (frognano-test--time 'fixing)
  ;; While the fix runs: the same command again (M-x eglot-execute-command) joins the running
  ;; job at once, and the server answers code actions at once.
  (frognano-test--step "responsive")
  (let ((action (cl-find "frognano.fix" (frognano-test--get 'first_actions)
                         :key (lambda (a) (plist-get a :command)) :test #'equal))
        (start (float-time)))
    (condition-case err
        (eglot-execute-command frognano-test--server 'frognano.fix (plist-get action :arguments))
      (error (frognano-test--put 'again_error (error-message-string err))))
    (frognano-test--put 'again_s (- (float-time) start)))
  (let* ((start (float-time))
         (actions (frognano-test--first-diag-actions buffer)))
    (frognano-test--put 'actions_during_fix_s (- (float-time) start))
    (frognano-test--put 'actions_during_fix (vconcat (mapcar #'frognano-test--action-summary actions))))
  ;; Sit idle for a while, as a user reading the code would, with a timer that must keep firing.
  (frognano-test--step "watch")
  (let* ((ticks nil)
         (timer (run-at-time 0.1 0.1 (lambda () (push (float-time) ticks))))
         (watch (string-to-number (or (getenv "FROGNANO_TEST_WATCH_S") "4"))))
    (frognano-test--idle #'ignore watch)
    (cancel-timer timer)
    (frognano-test--put 'ticks (length ticks))
    (frognano-test--put 'max_tick_gap_s (or (cl-loop for (a b) on ticks while b maximize (- a b)) 0)))
  (frognano-test--put 'state_after_watch (frognano-test--state))
  (frognano-test--put 'results_before_shutdown (length frognano-test--results))
  (frognano-test--time 'watched)
  ;; The user quits (M-x eglot-shutdown) with the fix still running.
  (frognano-test--step "shutdown")
  (let ((start (float-time))
        (process (jsonrpc--process frognano-test--server)))
    (condition-case err
        (eglot-shutdown frognano-test--server nil 5 t)
      (error (frognano-test--put 'shutdown_error (error-message-string err))))
    (frognano-test--idle (lambda () (not (process-live-p process))) 10)
    (frognano-test--put 'shutdown_s (- (float-time) start))
    (frognano-test--put 'server_exit (list :live (frognano-test--bool (process-live-p process))
                                           :status (format "%s" (process-status process))
                                           :code (process-exit-status process)))))

(defun frognano-test--main ()
  (let* ((file (getenv "FROGNANO_TEST_FILE"))
         (scenario (or (getenv "FROGNANO_TEST_SCENARIO") "flow"))
         (buffer (and (not (equal scenario "probe")) (frognano-test--connect file))))
    (frognano-test--put 'scenario scenario)
    (pcase scenario
      ("probe" nil)
      ("flow" (frognano-test--scenario-flow buffer t nil))
      ("unsaved" (frognano-test--scenario-flow
                  buffer nil (string-to-number (or (getenv "FROGNANO_TEST_CLEAR_S") "20"))))
      ("diagnostics" (frognano-test--wait-diagnostics buffer))
      ("slowfix" (frognano-test--scenario-slowfix buffer))
      (_ (error "unknown scenario %s" scenario)))
    (frognano-test--step "done")))

;;; Run, and write the result whatever happened.

(defun frognano-test--tail (buffer-or-name chars)
  (let ((buffer (and buffer-or-name (get-buffer buffer-or-name))))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (buffer-substring-no-properties (max (point-min) (- (point-max) chars)) (point-max))))))

(defun frognano-test--write ()
  (let ((buffer (and (getenv "FROGNANO_TEST_FILE") (get-file-buffer (getenv "FROGNANO_TEST_FILE"))))
        (server frognano-test--server))
    (frognano-test--put 'elapsed (frognano-test--now))
    (frognano-test--put 'eglot_file (locate-library "eglot"))
    (frognano-test--put 'eglot_version (frognano-test--eglot-version))
    (frognano-test--put 'emacs_version emacs-version)
    (when (buffer-live-p buffer)
      (frognano-test--put 'modified (frognano-test--bool (buffer-modified-p buffer)))
      (frognano-test--put 'remaining (vconcat (frognano-test--diags buffer)))
      (frognano-test--put 'remaining_other (vconcat (frognano-test--other-diags))))
    (frognano-test--put 'statuses (vconcat (reverse frognano-test--statuses)))
    (frognano-test--put 'shown (vconcat (reverse frognano-test--shown)))
    (frognano-test--put 'sent (vconcat (reverse frognano-test--sent)))
    (frognano-test--put 'commands (vconcat (reverse frognano-test--commands)))
    (frognano-test--put 'progress (vconcat (reverse frognano-test--progress)))
    (frognano-test--put 'results (vconcat (reverse frognano-test--results)))
    (frognano-test--put 'requests (vconcat (reverse frognano-test--requests)))
    (frognano-test--put 'server_alive (frognano-test--bool (and server (jsonrpc-running-p server))))
    (frognano-test--put 'messages (frognano-test--tail "*Messages*" 6000))
    (when server
      (frognano-test--put 'events (frognano-test--tail (jsonrpc-events-buffer server) 12000))
      (frognano-test--put 'stderr (frognano-test--tail (jsonrpc-stderr-buffer server) 6000)))
    (with-temp-file (getenv "FROGNANO_TEST_RESULT")
      (insert (json-encode frognano-test--result)))))

(unwind-protect
    (condition-case err
        (progn (frognano-test--main)
               (frognano-test--put 'ok t))
      (error (frognano-test--put 'ok :json-false)
             (frognano-test--put 'error (error-message-string err))))
  (condition-case err
      (frognano-test--write)
    (error (with-temp-file (getenv "FROGNANO_TEST_RESULT")
             (insert (json-encode `((ok . :json-false) (step . "write")
                                    (error . ,(error-message-string err))))))))
  (when (and frognano-test--server (jsonrpc-running-p frognano-test--server))
    (ignore-errors (eglot-shutdown frognano-test--server nil 3)))
  (kill-emacs 0))

;;; driver.el ends here
