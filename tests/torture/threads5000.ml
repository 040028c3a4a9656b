(* threads5000.ml — 5000 systhreads created and joined, 50 at a time, each
   doing a little work: memory must stay flat (the checker compares the peak
   RSS with the program run alone).
   torture-libs: unix threads *)
let[@inline never] spin n =
  let acc = ref 0 in
  for i = 1 to n do acc := (!acc + i) land 0xffff done;
  ignore (Sys.opaque_identity !acc)

let () =
  let done_ = Atomic.make 0 in
  for _ = 1 to 100 do
    let ts = List.init 50 (fun _ -> Thread.create (fun () -> spin 20_000; Atomic.incr done_) ()) in
    List.iter Thread.join ts
  done;
  Printf.printf "threads done: %d\n" (Atomic.get done_)
