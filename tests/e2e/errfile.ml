(* errfile.ml — e2e program whose descriptor 2 is, when it ends, a file of
   its own:
   - "open FILE", started with stderr closed (2>&-): the first file it
     opens gets descriptor 2; it writes its result there and exits without
     closing it (at_exit flushes it), as programs do;
   - "dup2 FILE": it puts its log file over stderr, as a server does, and
     logs there.
   It prints on stdout the descriptor FILE got. The checker asserts FILE
   holds the program's lines and nothing of flamme's, as without flamme.
   Usage: errfile.exe (open|dup2) FILE *)

let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let fd_number (fd : Unix.file_descr) : int = Obj.magic fd

let () =
  let file = Sys.argv.(2) in
  match Sys.argv.(1) with
  | "open" ->
    let fd = Unix.openfile file [Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC] 0o644 in
    Printf.printf "fd=%d\n%!" (fd_number fd);
    let oc = Unix.out_channel_of_descr fd in
    Printf.fprintf oc "result %d\n" (fib 35)
  | "dup2" ->
    let fd = Unix.openfile file [Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC] 0o644 in
    Unix.dup2 fd Unix.stderr;
    Unix.close fd;
    Printf.printf "fd=%d\n%!" (fd_number Unix.stderr);
    prerr_endline "log: started";
    Printf.eprintf "log: result %d\n%!" (fib 35)
  | _ -> prerr_endline "usage: errfile.exe (open|dup2) FILE"; exit 2
