(* systhread.ml — e2e program: a spawned domain whose main thread runs
   [work_domain] while a systhread it created (Thread.create) runs
   [work_thread]; the two share the domain lock and take turns. The checker
   asserts that [work_thread]'s samples belong to a thread other than the
   domain's main thread and that its stacks reach start_thread.
   Build: ocamlopt -I +unix -I +threads unix.cmxa threads.cmxa systhread.ml
   Usage: systhread.exe [PERCENT]  (default 100 = ~3 s of CPU) *)

let[@inline never] work_thread n =
  let acc = ref 5 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

let[@inline never] work_domain n =
  let acc = ref 9 in
  for i = 1 to n do
    acc := (!acc * 69069 + i) land 0x3fffffff
  done;
  !acc

(* Chunks of work keep both threads runnable for the whole run; the domain
   lock is handed over at the systhreads tick (50 ms). *)
let[@inline never] in_domain n =
  let tr = ref 0 in
  let t = Thread.create (fun () -> for _ = 1 to 100 do tr := (!tr + work_thread n) land 0xffffff done) () in
  let dr = ref 0 in
  for _ = 1 to 100 do dr := (!dr + work_domain n) land 0xffffff done;
  Thread.join t;
  (!dr, !tr)

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let n = 11_000_000 * percent / 100 in
  let d = Domain.spawn (fun () -> in_domain n) in
  let dr, tr = Domain.join d in
  Printf.printf "systhread: domain=%d thread=%d\n" dr tr
