(* tests/unwind/yielder.ml — systhreads that compute and Thread.yield
   (cooperative servers do this), plus a Mutex-protected shared counter.
   Usage: yielder.exe [SCALE] *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 25000.))
let m = Mutex.create ()
let total = ref 0

let[@inline never] rec crunch n acc = if n = 0 then acc else crunch (n - 1) ((acc * 17 + n) land 0xfffff)

let[@inline never] worker id () =
  for i = 1 to rounds do
    let v = crunch 3000 (id + i) in
    Mutex.lock m;
    total := !total + v;
    Mutex.unlock m;
    Thread.yield ()
  done

let () =
  let ts = List.init 3 (fun id -> Thread.create (worker id) ()) in
  worker 9 ();
  List.iter Thread.join ts;
  Printf.printf "yielder: %d\n" (!total land 0xffff)
