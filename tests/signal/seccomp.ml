(* seccomp.ml — tests/signal program, also run by tests/torture (agent
   preloaded): a seccomp filter refuses process_vm_readv, the agent's checked
   reads. "early": the filter is installed, then the program execs itself
   ("run"), so the agent starts under it; "late": installed while profiling.
   Either way the program then runs C code with a garbage frame pointer
   (which the walker may only follow through checked reads) and OCaml work
   ([Work.burn]).
   Usage: seccomp.exe early|late|run
   Prints "seccomp: done".
   torture-libs: unix *)

external deny_vm_readv : unit -> int = "seccomp_deny_vm_readv"
external spin : int -> int = "seccomp_spin" [@@noalloc]

let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)
let[@inline never] ocaml_work () = Sys.opaque_identity (fib 38) + 1
let[@inline never] c_work () = spin 400_000_000

let work () =
  ignore (ocaml_work ());
  ignore (c_work ());
  print_endline "seccomp: done"

let deny () =
  let e = deny_vm_readv () in
  if e <> 0 then (Printf.eprintf "seccomp: cannot install the filter (errno %d)\n" e; exit 3)

let () =
  match Sys.argv.(1) with
  | "early" -> deny (); Unix.execv Sys.executable_name [| Sys.executable_name; "run" |]
  | "late" -> deny (); work ()
  | _ -> work ()
